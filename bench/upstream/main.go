// Command upstream is the backend for the live benchmarks: an HTTP server
// on each address given that answers every request with a short body.
// Usage: upstream 127.0.0.1:9001 127.0.0.1:9002 ...
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
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
			srv := &http.Server{Addr: addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				_, _ = w.Write(body)
			})}
			log.Fatal(srv.ListenAndServe())
		}()
	}
	wg.Wait()
}
