// Command skew measures what the kernel's copy into a socket costs when a
// write's bytes lie at another offset within a 64-byte line than where
// the socket's pages take them: a proxy's loop on one core reads 256 KiB
// at a time from a source and writes it on to a sink (both on another
// core, bench/skew.sh), each write as a mode frames it. It prints the
// rate and the proxy's CPU time a GiB.
//
//	skew source ADDR           writes 256 KiB buffers to each connection
//	skew sink ADDR             reads each connection to its end
//	skew proxy SRC DST MODE    moves 4 GiB from SRC to DST
//
// Modes: plain (the bytes alone, from a 64-byte aligned buffer), framed
// (an HTTP/1.1 chunk: a 7-byte size line, the bytes, CRLF, the bytes read
// to the buffer's aligned start), window (the same chunk, the bytes read
// where rawio.ChunkWindow puts them).
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/rotor-lb/rotor/internal/cores"
	"github.com/rotor-lb/rotor/internal/rawio"
)

const piece = 256 << 10

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: skew source ADDR | sink ADDR | proxy SRC DST MODE")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "source":
		err = serve(os.Args[2], func(c net.Conn) {
			b := make([]byte, piece)
			for {
				if _, err := c.Write(b); err != nil {
					return
				}
			}
		})
	case "sink":
		err = serve(os.Args[2], func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	case "proxy":
		if len(os.Args) != 5 {
			err = fmt.Errorf("proxy wants SRC DST MODE")
			break
		}
		err = proxy(os.Args[2], os.Args[3], os.Args[4])
	default:
		err = fmt.Errorf("%q is not a role (source, sink, proxy)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "skew:", err)
		os.Exit(1)
	}
}

func serve(addr string, handle func(net.Conn)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			handle(c)
		}()
	}
}

func proxy(src, dst, mode string) error {
	s, err := net.Dial("tcp", src)
	if err != nil {
		return err
	}
	defer s.Close()
	d, err := net.Dial("tcp", dst)
	if err != nil {
		return err
	}
	defer d.Close()
	buf := make([]byte, piece+2*64) // large: page-aligned
	var read []byte
	framed := true
	switch mode {
	case "plain":
		read, framed = buf[:piece], false
	case "framed":
		read = buf[:piece-9] // a chunk of the window's size, to compare like with like
	case "window":
		read = rawio.ChunkWindow(buf[:piece])
	default:
		return fmt.Errorf("%q is not a mode (plain, framed, window)", mode)
	}
	line := []byte(strconv.FormatInt(int64(len(read)), 16) + "\r\n")
	crlf := []byte("\r\n")
	const total = 4 << 30
	start, cpu0 := time.Now(), cores.CPU()
	for moved := 0; moved < total; moved += len(read) {
		if _, err := io.ReadFull(s, read); err != nil {
			return err
		}
		bufs := net.Buffers{read}
		if framed {
			bufs = net.Buffers{line, read, crlf}
		}
		if _, err := bufs.WriteTo(d); err != nil {
			return err
		}
	}
	elapsed, cpu := time.Since(start), cores.CPU()-cpu0
	fmt.Printf("%-8s %6.0f MB/s  %.2f s of CPU a GiB\n", mode, total/elapsed.Seconds()/1e6, cpu.Seconds()/(total>>30))
	return nil
}
