// Package webui holds rotor's web pages, embedded: the lesson page that
// `rotor web` serves and the live page on the admin listener's /ui. The
// pages draw what rotor's Go code computes, fetched as JSON; no script in
// them places a key or picks an endpoint.
package webui

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
)

//go:embed assets
var files embed.FS

// assets is the embedded folder itself.
var assets, _ = fs.Sub(files, "assets")

// secure sets the headers every page and asset carries: nothing but this
// origin's scripts and styles run, no other site may frame the page (its
// buttons change things), and types are not sniffed.
func secure(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

// Assets serves the shared scripts and styles; mount it with the prefix
// stripped, e.g. at /assets/.
func Assets() http.Handler {
	fsrv := http.FileServerFS(assets)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if path.Ext(r.URL.Path) == ".html" {
			http.NotFound(w, r)
			return
		}
		secure(w.Header())
		fsrv.ServeHTTP(w, r)
	})
}

// Page serves one page, by its file name: "lesson.html" or "live.html".
func Page(name string) http.Handler {
	body, err := fs.ReadFile(assets, name)
	if err != nil {
		panic("webui: no page " + name) // a programming error, found by any test
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secure(w.Header())
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(body)
	})
}
