// Command benchtable turns `go test -bench -benchmem` output into markdown
// tables of ns/op, cpu-ns/op (when the benchmarks report it), B/op and
// allocs/op, with each row's ratios to a baseline row measured in the same
// run. A ratio above 1 means the row is slower than the baseline.
//
// Benchmark names are read as Benchmark<Group>/<row...>/<column>: one table
// is printed per last name element (for BenchmarkCompare: serial and
// parallel), with a row for each contender. When a benchmark ran several
// times (-count), the median of each metric is shown, with the spread of
// ns/op (min–max) so that noise is visible.
//
// Usage:
//
//	go test -run '^$' -bench Compare -benchmem -count 5 | tee out.txt
//	go run ./cmd/benchtable -base floodgate/key < out.txt
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	base := flag.String("base", "floodgate/key", "row the ratios are taken against")
	flag.Parse()
	runs, order, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if len(order) == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: no benchmark results on standard input")
		os.Exit(1)
	}
	write(os.Stdout, runs, order, *base)
}

// sample is the metrics of one benchmark line; -1 when absent.
type sample struct{ ns, cpu, bytes, allocs float64 }

// key names a result: its table (column) and its row.
type key struct{ table, row string }

// parse reads benchmark lines, returning every sample of every result and
// the results in first-seen order.
func parse(r io.Reader) (map[key][]sample, []key, error) {
	runs := make(map[key][]sample)
	var order []key
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i] // the GOMAXPROCS suffix
			}
		}
		// Benchmark<Group>/<row...>/<column>; shorter names go to an
		// untitled table under their full name.
		parts := strings.Split(name, "/")
		k := key{table: "", row: strings.TrimPrefix(name, "Benchmark")}
		if len(parts) >= 3 {
			k = key{table: parts[len(parts)-1], row: strings.Join(parts[1:len(parts)-1], "/")}
		}
		s := sample{ns: -1, cpu: -1, bytes: -1, allocs: -1}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				s.ns = v
			case "cpu-ns/op":
				s.cpu = v
			case "B/op":
				s.bytes = v
			case "allocs/op":
				s.allocs = v
			}
		}
		if s.ns < 0 {
			continue
		}
		if _, seen := runs[k]; !seen {
			order = append(order, k)
		}
		runs[k] = append(runs[k], s)
	}
	return runs, order, sc.Err()
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func metric(ss []sample, f func(sample) float64) []float64 {
	out := make([]float64, 0, len(ss))
	for _, s := range ss {
		out = append(out, f(s))
	}
	return out
}

// write prints one markdown table per table name.
func write(w io.Writer, runs map[key][]sample, order []key, base string) {
	var tables []string
	for _, k := range order {
		if !slices.Contains(tables, k.table) {
			tables = append(tables, k.table)
		}
	}
	for ti, t := range tables {
		if ti > 0 {
			fmt.Fprintln(w)
		}
		if t != "" {
			fmt.Fprintf(w, "**%s**\n\n", t)
		}
		baseNs, baseCPU := -1.0, -1.0
		if ss, ok := runs[key{t, base}]; ok {
			baseNs = median(metric(ss, func(s sample) float64 { return s.ns }))
			baseCPU = median(metric(ss, func(s sample) float64 { return s.cpu }))
		}
		fmt.Fprintf(w, "| benchmark | ns/op (median) | ns/op min–max | cpu-ns/op | B/op | allocs/op | ns/op vs %s | cpu-ns/op vs %s | runs |\n", base, base)
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, k := range order {
			if k.table != t {
				continue
			}
			ss := runs[k]
			ns := metric(ss, func(s sample) float64 { return s.ns })
			cpu := median(metric(ss, func(s sample) float64 { return s.cpu }))
			ratio, cpuRatio := "n/a", "n/a"
			if baseNs > 0 {
				ratio = fmt.Sprintf("%.2fx", median(ns)/baseNs)
			}
			if baseCPU > 0 && cpu > 0 {
				cpuRatio = fmt.Sprintf("%.2fx", cpu/baseCPU)
			}
			row := k.row
			if row == base {
				row = "**" + row + "**"
			}
			fmt.Fprintf(w, "| %s | %.1f | %.0f–%.0f | %s | %s | %s | %s | %s | %d |\n", row, median(ns),
				slices.Min(ns), slices.Max(ns), orDash(cpu),
				orDash(median(metric(ss, func(s sample) float64 { return s.bytes }))),
				orDash(median(metric(ss, func(s sample) float64 { return s.allocs }))),
				ratio, cpuRatio, len(ss))
		}
	}
}

// orDash formats a metric to one decimal at most, or "-" when the run did
// not report it.
func orDash(v float64) string {
	if v < 0 {
		return "-"
	}
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}
