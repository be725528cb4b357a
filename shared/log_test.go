package shared

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// What the Redis client library logs goes to rotor's log as a warning in
// its format, with any URL's userinfo masked.
func TestLibraryLogGoesToRotorsLog(t *testing.T) {
	var out bytes.Buffer
	libLog{slog.New(slog.NewJSONHandler(&out, nil))}.Printf(context.Background(), "redis: failed to dial %s: %v\n", "redis://rotor:hunter2@127.0.0.1:6379", "refused")
	var line map[string]any
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatalf("not one JSON line: %q (%v)", out.String(), err)
	}
	said, _ := line["said"].(string)
	if line["level"] != "WARN" || !strings.HasPrefix(said, "redis: failed to dial redis://") || strings.Contains(out.String(), "hunter2") || strings.HasSuffix(said, "\n") {
		t.Fatalf("logged %q; want a warning saying what the library said, the password masked", out.String())
	}
}
