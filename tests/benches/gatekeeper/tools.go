//go:build tools

// Package gatekeeper only pins OPA Gatekeeper; build.sh runs `go build` on its manager (the
// module root's main package) from inside this module.
package gatekeeper

import _ "github.com/open-policy-agent/gatekeeper/v3"
