module github.com/prestroid/prestroid

go 1.26.0

require gopkg.in/yaml.v3 v3.0.1

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/molecule-man/go-brrr v1.3.1 // indirect
	github.com/trinodb/trino-go-client v1.1.0 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasthttp v1.78.0 // indirect
)
