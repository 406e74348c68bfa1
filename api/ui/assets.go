package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"path"
	"time"
)

//go:embed static
var assets embed.FS

// indexHTML is the page; it is served only to a browser with a session.
var indexHTML = mustRead("static/index.html")

// asset is a file the page loads, open to anyone: it holds no data.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// staticAssets are the files under /ui/static/, by name. The ETag is the
// content's hash, so a browser revalidates cheaply and never runs an old
// script against a newer node.
var staticAssets = func() map[string]asset {
	types := map[string]string{
		".css": "text/css; charset=utf-8",
		".js":  "text/javascript; charset=utf-8",
	}
	m := make(map[string]asset, len(types))
	for _, name := range []string{"app.css", "app.js"} {
		body := mustRead("static/" + name)
		sum := sha256.Sum256(body)
		m[name] = asset{body: body, contentType: types[path.Ext(name)], etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return m
}()

func mustRead(name string) []byte {
	b, err := assets.ReadFile(name)
	if err != nil {
		panic("ui: embedded file missing: " + err.Error())
	}
	return b
}

func serveStatic(w http.ResponseWriter, r *http.Request) {
	a, ok := staticAssets[r.PathValue("file")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", a.contentType)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("ETag", a.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}
