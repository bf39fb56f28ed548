module github.com/floodgate-go/floodgate/examples/http

go 1.26.0

replace github.com/floodgate-go/floodgate => ../..

require (
	github.com/floodgate-go/floodgate v0.0.0-00010101000000-000000000000
	github.com/go-chi/chi/v5 v5.5.0
)
