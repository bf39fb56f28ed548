// Command http is a small API limited with floodgate's httplimit middleware
// behind a chi router: a per-IP limit on the public routes, per-user and
// per-tenant limits on the authenticated ones (after authentication and the
// access check), and a login limit that counts failed attempts only.
//
//	go run . &
//	curl -i localhost:8080/prices
package main

import (
	"log"
	"net/http"
)

func main() {
	log.Println("listening on :8080")
	log.Fatal(http.ListenAndServe(":8080", newRouter(nil)))
}
