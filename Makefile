# Common tasks. The README's two commands do not need make; these are
# shortcuts for developers.

.PHONY: test check

# The whole test suite (installs redis-server if missing).
test:
	./scripts/test.sh

# Static checks run by CI before the tests.
check:
	gofmt -l $$(git ls-files '*.go')
	go vet ./...
	staticcheck ./...
