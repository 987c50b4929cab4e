package protocol

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
)

// Saved queries (a queued statement kept in the admission store until it is
// submitted) are sealed with a key derived from the route secret, so that
// any replica sharing the secret can open them and nothing else can.

// payloadKey derives the key that seals saved queries from the route secret.
func (s *Signer) payloadKey() []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("prestroid admission payload v1"))
	return m.Sum(nil)
}

// Seal encrypts plain with AES-256-GCM, bound to aad: nonce || ciphertext.
func (s *Signer) Seal(plain, aad []byte) []byte {
	block, _ := aes.NewCipher(s.payloadKey())
	gcm, _ := cipher.NewGCM(block)
	nonce := make([]byte, gcm.NonceSize(), gcm.NonceSize()+len(plain)+gcm.Overhead())
	_, _ = rand.Read(nonce)
	return gcm.Seal(nonce, nonce, plain, aad)
}

// ErrPayload: a saved query that does not open (another route secret, or
// tampered with in the store).
var ErrPayload = errors.New("proxy: saved query does not open under this route secret")

func (s *Signer) Open(sealed, aad []byte) ([]byte, error) {
	block, _ := aes.NewCipher(s.payloadKey())
	gcm, _ := cipher.NewGCM(block)
	if len(sealed) < gcm.NonceSize() {
		return nil, ErrPayload
	}
	plain, err := gcm.Open(nil, sealed[:gcm.NonceSize()], sealed[gcm.NonceSize():], aad)
	if err != nil {
		return nil, ErrPayload
	}
	return plain, nil
}
