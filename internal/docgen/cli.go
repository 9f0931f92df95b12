package docgen

import (
	"io"

	"github.com/gpuplane/gpuplane/internal/cli"
	"github.com/gpuplane/gpuplane/internal/docgen/cobradoc"
)

// cliPages writes a page per command of gpuplane with cobra's doc
// generator. gpuplane-agent's pages are written by cmd/gpuplane-agent's
// TestReferenceIsCurrent (cobradoc says why).
func cliPages(_ string, out Pages) error {
	pages, err := cobradoc.Pages(cli.NewRoot("gpuplane", io.Discard, io.Discard))
	if err != nil {
		return err
	}
	for rel, data := range pages {
		out[rel] = data
	}
	return nil
}
