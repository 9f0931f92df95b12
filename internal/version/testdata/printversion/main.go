// Command printversion prints the build it is, for version's tests.
package main

import (
	"fmt"

	"github.com/gpuplane/gpuplane/internal/version"
)

func main() { fmt.Println(version.String(version.Get())) }
