// Command upstream is the backend for the live benchmarks: an HTTP server
// on each address given that answers every request with a short body,
// except two paths for large bodies: GET /bytes/N answers N zero bytes
// (with a Content-Length, or chunked with ?chunked=1), and POST /sink reads
// the request body to its end and answers how many bytes it read.
// Usage: upstream 127.0.0.1:9001 127.0.0.1:9002 ...
package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"sync"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: upstream ADDR...")
		os.Exit(2)
	}
	body := []byte("hello from upstream\n")
	var wg sync.WaitGroup
	for _, addr := range os.Args[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mux := http.NewServeMux()
			mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				_, _ = w.Write(body)
			})
			mux.HandleFunc("GET /bytes/{n}", sendBytes)
			mux.HandleFunc("POST /bytes/{n}", sendBytes) // the request's body read first
			mux.HandleFunc("POST /sink", sink)
			srv := &http.Server{Addr: addr, Handler: mux}
			log.Fatal(srv.ListenAndServe())
		}()
	}
	wg.Wait()
}

var zeros = make([]byte, 256<<10)

// sendBytes answers N zero bytes, 256 KiB a write, once it has read the
// request's body.
func sendBytes(w http.ResponseWriter, r *http.Request) {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
	if err != nil || n < 0 {
		http.Error(w, "bad size", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if r.URL.Query().Get("chunked") == "" {
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	}
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := w.Write(zeros[:k]); err != nil {
			return
		}
		n -= k
	}
}

// sink reads the request body to its end.
func sink(w http.ResponseWriter, r *http.Request) {
	n, err := io.CopyBuffer(io.Discard, r.Body, make([]byte, 256<<10))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintln(w, n)
}
