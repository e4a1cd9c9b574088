// Package monitoring holds the end-to-end tests of the status page, `sluice
// top` and `sluice tap` against the real agent binary under load: the page
// in Debian's headless chromium (driven through the DevTools protocol), top
// in a real terminal (tmux), tap as a command. scripts/test.sh installs
// chromium and tmux; without them the tests skip (and fail under CI).
package monitoring
