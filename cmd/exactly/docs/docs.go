// Package docs holds the reference pages of exactly, embedded so that the
// binary can print one with `exactly help TOPIC`. Each page is a Markdown
// file of this folder; a topic is its file name without ".md".
package docs

import "embed"

// FS holds every page of this folder, by file name ("sink.md").
//
//go:embed *.md
var FS embed.FS
