package floodgate_test

import (
	"context"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/memory"
)

// The README's library quick start, run (TestREADMEQuickStart keeps the
// README's main the same as this body).
func Example_quickStart() {
	store := memory.New(nil) // embedded store; see store/redis for fleets
	defer store.Close()

	lim, err := floodgate.New("api", store, []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.TokenBucket, Limit: 20, Window: time.Second, Burst: 40, Key: []string{"user"}},
	}, nil)
	if err != nil {
		panic(err) // a *floodgate.ConfigError names the limiter, rule and field
	}

	d := lim.AllowKey(context.Background(), "alice")
	if !d.Allowed {
		fmt.Println("retry in", d.RetryAfter)
		return
	}
	fmt.Println("admitted;", d.Remaining, "left") // admitted; 39 left
	// Output: admitted; 39 left
}

// TestREADMEQuickStart checks that the README's library quick start is a
// Go program whose main is Example_quickStart's body, so that what the
// README shows is what the example runs, and that it imports what it uses.
func TestREADMEQuickStart(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Library quick start\n")
	if !ok {
		t.Fatal(`README.md has no "## Library quick start" section`)
	}
	_, program, ok := strings.Cut(section, "```go\n")
	program, _, ok2 := strings.Cut(program, "```\n")
	if !ok || !ok2 {
		t.Fatal("README.md's library quick start has no Go code block")
	}
	f, err := parser.ParseFile(token.NewFileSet(), "README.md", program, parser.ImportsOnly)
	if err != nil {
		t.Fatalf("the quick start is not a Go file: %v", err)
	}
	readmeMain := body(t, "README.md", program, "func main() {")
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if !strings.Contains(readmeMain, path.Base(p)+".") {
			t.Errorf("the quick start imports %s but does not use it", p)
		}
	}

	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	example := body(t, "readme_test.go", string(src), "func Example_quickStart() {")
	example = example[:strings.Index(example, "\t// Output:")]
	if readmeMain != example {
		t.Errorf("README.md's quick start main differs from Example_quickStart:\n--- README.md\n%s--- Example_quickStart\n%s", readmeMain, example)
	}
}

// body returns the lines of src between the line opening and the next line
// that is "}".
func body(t *testing.T, file, src, opening string) string {
	t.Helper()
	_, rest, ok := strings.Cut(src, "\n"+opening+"\n")
	rest, _, ok2 := strings.Cut(rest, "\n}\n")
	if !ok || !ok2 {
		t.Fatalf("%s has no %q ... }", file, opening)
	}
	return rest + "\n"
}
