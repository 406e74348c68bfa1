// Package security loads, reloads and makes quorate's credentials: TLS
// certificates that name a node, scoped bearer tokens and gossip keys.
package security
