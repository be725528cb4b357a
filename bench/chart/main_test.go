package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestChart(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "results.tsv"), filepath.Join(dir, "chart.svg")
	write := func(s string) {
		if err := os.WriteFile(in, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("HTTP/1.1\tdirect\t30000\nHTTP/1.1\trotor\t20000\nHTTP/1.1\thaproxy\t40000\nTCP SET\trotor\t50000\nTCP SET\thaproxy\t50000\nTCP SET\tcaddy\t-\n")
	if err := run(in, out, "haproxy", "t", []string{"direct"}); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(svg), "<svg") {
		t.Fatalf("no chart written: %v", err)
	}
	for _, bad := range []struct{ tsv, want string }{
		{"HTTP/1.1\trotor\tfast\n", `value "fast" is not a number`},
		{"HTTP/1.1 rotor 1\n", "want TEST<TAB>TARGET<TAB>VALUE"},
		{"HTTP/1.1\trotor\t1\n", `no results for the reference "haproxy"`},
	} {
		write(bad.tsv)
		if err := run(in, out, "haproxy", "t", nil); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: error %v, want %q", bad.tsv, err, bad.want)
		}
	}
}
