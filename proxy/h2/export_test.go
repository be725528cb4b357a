package h2

import (
	"bytes"

	"golang.org/x/net/http2/hpack"
)

// encodeBlock is fields, name and value in turn, as an HPACK header
// block, for tests that write frames themselves (a new encoder each: no
// entry of an earlier block is referred to).
func encodeBlock(fields ...string) []byte {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for i := 0; i < len(fields); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return b.Bytes()
}

// EncodeBlock is encodeBlock, for package h2_test.
var EncodeBlock = encodeBlock
