// Command idlers keeps many keep-alive clients that each send a GET now
// and then, idle between: what a proxy's way of holding an idle client
// costs it when the client comes back. Each of -conns connections sends
// a request, reads the answer, and waits -every (±10%, so that they do
// not come in step) before the next, for -for; it prints the requests
// answered and the failures.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18400", "where to send the requests")
	conns := flag.Int("conns", 200, "connections")
	every := flag.Duration("every", time.Second, "the wait between a connection's requests")
	total := flag.Duration("for", 10*time.Second, "how long to run")
	flag.Parse()
	if *conns < 1 || *conns > 10000 || *every <= 0 || *total <= 0 {
		fmt.Fprintln(os.Stderr, "idlers: -conns must be 1 to 10000, -every and -for more than 0")
		os.Exit(2)
	}
	end := time.Now().Add(*total)
	var done, failed atomic.Int64
	var wg sync.WaitGroup
	for i := range *conns {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			// Spread the first requests over one wait.
			time.Sleep(time.Duration(rng.Int64N(int64(*every))))
			c, err := net.Dial("tcp", *addr)
			if err != nil {
				failed.Add(1)
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			for time.Now().Before(end) {
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: idlers\r\n\r\n"); err != nil {
					failed.Add(1)
					return
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					failed.Add(1)
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					failed.Add(1)
					return
				}
				done.Add(1)
				jitter := time.Duration(rng.Int64N(int64(*every)/5)) - *every/10
				time.Sleep(*every + jitter)
			}
		})
	}
	wg.Wait()
	fmt.Printf("%d %d\n", done.Load(), failed.Load())
}
