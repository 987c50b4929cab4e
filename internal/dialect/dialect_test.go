package dialect

import (
	"net/http"
	"reflect"
	"testing"
)

func TestFromVersion(t *testing.T) {
	for v, want := range map[string]Engine{
		"0.296-8661b73": Presto, "0.287": Presto, "476": Trino, "476-e": Trino, "476-SNAPSHOT": Trino,
		"": Unknown, "v1": Unknown, "12a": Unknown,
	} {
		if got := FromVersion(v); got != want {
			t.Errorf("FromVersion(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	for s, want := range map[string]Engine{"": Unknown, "trino": Trino, " Presto ": Presto} {
		if got, err := Parse(s); err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := Parse("prestodb"); err == nil {
		t.Error("Parse(prestodb): no error")
	}
}

func TestOf(t *testing.T) {
	cases := []struct {
		h    http.Header
		want Engine
	}{
		{http.Header{"X-Trino-User": {"a"}}, Trino},
		{http.Header{"X-Presto-User": {"a"}, "Authorization": {"x"}}, Presto},
		{http.Header{"X-Presto-User": {"a"}, "X-Trino-Source": {"old-jdbc"}}, Trino},
		{http.Header{"Authorization": {"x"}, "X-Prestroid-Class": {"1"}}, Unknown},
	}
	for _, c := range cases {
		if got := Of(c.h); got != c.want {
			t.Errorf("Of(%v) = %v, want %v", c.h, got, c.want)
		}
	}
}

func TestRenameRoundTrip(t *testing.T) {
	presto := http.Header{
		"X-Presto-User":    {"alice"},
		"X-Presto-Session": {"a=1", "b=2"},
		"Authorization":    {"Basic x"},
		"X-Prestroid-Tag":  {"t"},
	}
	canon := Canonical(presto)
	want := http.Header{
		"X-Trino-User":    {"alice"},
		"X-Trino-Session": {"a=1", "b=2"},
		"Authorization":   {"Basic x"},
		"X-Prestroid-Tag": {"t"},
	}
	if !reflect.DeepEqual(canon, want) {
		t.Fatalf("Canonical = %v, want %v", canon, want)
	}
	if back := For(canon, Presto); !reflect.DeepEqual(back, presto) {
		t.Fatalf("For(Presto) = %v, want %v", back, presto)
	}
	trino := http.Header{"X-Trino-User": {"bob"}}
	if got := For(trino, Trino); !reflect.DeepEqual(got, trino) {
		t.Fatalf("For(Trino) changed a Trino header set: %v", got)
	}
	if Presto.Header("Resource-Estimate") != "X-Presto-Resource-Estimate" || Unknown.Header("User") != "X-Trino-User" {
		t.Fatal("Header")
	}
}
