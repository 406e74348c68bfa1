// Package ui serves the live cluster status page at /ui/ of every node's HTTP port.
//
// The page is plain HTML, CSS and JavaScript embedded in the binary: nothing
// is built and nothing is fetched from elsewhere. It polls /ui/api/overview
// about once a second and computes rates from the change in the totals
// between polls. Every value it shows is also in a stable data-* attribute,
// so that tests (and scripts) read the page without parsing its text.
//
// A browser presents a read token once, by the login form or by a
// /ui/?token=T link, and keeps it in an HttpOnly cookie scoped to /ui/.
// Scripts may send the token as "Authorization: Bearer T" instead.
package ui
