package server

import "testing"

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
