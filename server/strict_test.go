package server

import (
	"bytes"
	"testing"
)

func TestStrictCheck(t *testing.T) {
	for body, want := range map[string]string{
		`{"limiter":"api","attributes":{"user":"u"},"cost":1,"peek":false}`: "",
		`{"lim\u0069ter":"api"}`:                       "",
		` { "limiter" : "api" , "attributes" : { } } `: "",
		`{"attributes":{"a":"x","\u0061":"y"}}`:        "attributes.a: given twice",
		`{"attributes":{"user":null}}`:                 "attributes.user: must be a string, got null",
		`{"attributes":null}`:                          "",
		`{"LIMITER":"api"}`:                            `unknown field "LIMITER" (field names are case-sensitive: "limiter"); see docs/http-api.md`,
		`{"limiter":"api"`:                             "", // not JSON: decoding says so
		`{"limiter":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`: "",
	} {
		var req decisionRequest
		got := ""
		if e := strictCheck([]byte(body), &req); e != nil {
			got = e.detail
		}
		if got != want {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
	var sel selectRequest
	e := strictCheck([]byte(`{"candidates":[{"limiter":"a"},{"limiter":"b","Cost":2}]}`), &sel)
	if e == nil || e.detail != `unknown field "candidates[1].Cost" (field names are case-sensitive: "cost"); see docs/http-api.md` {
		t.Errorf("nested: %v", e)
	}
}

// BenchmarkDecodeCheck decodes the README's check body as the handler does
// (the strict check, then encoding/json) and runs the strict check alone:
// it runs on every request, so it is one scan of the bytes that allocates
// nothing, and this shows what it adds to the decoding it guards.
func BenchmarkDecodeCheck(b *testing.B) {
	body := []byte(`{"limiter":"api","attributes":{"user":"u1","org":"acme"}}`)
	b.Run("strict+decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req decisionRequest
			if e := decodeJSON(bytes.NewReader(body), &req, 1<<20); e != nil {
				b.Fatal(e)
			}
		}
	})
	b.Run("strict", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req decisionRequest
			if e := strictCheck(body, &req); e != nil {
				b.Fatal(e)
			}
		}
	})
}
