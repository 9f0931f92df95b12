// Command textsvg draws a command's output, read from stdin, as a terminal
// picture (docgen.TerminalSVG) on stdout: hack/docs-pictures.sh makes
// docs/images/gpuplane-status.svg with it.
//
//	gpuplane status | go run ./hack/textsvg -command 'gpuplane status' > status.svg
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gpuplane/gpuplane/internal/docgen"
)

func main() {
	command := flag.String("command", "", "the command whose output stdin is, shown above it")
	flag.Parse()
	text, err := io.ReadAll(os.Stdin)
	if err == nil {
		_, err = os.Stdout.Write(docgen.TerminalSVG(*command, string(text)))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "textsvg: %v\n", err)
		os.Exit(1)
	}
}
