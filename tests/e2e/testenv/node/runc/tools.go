//go:build tools

package runc

import (
	_ "github.com/opencontainers/runc"
)
