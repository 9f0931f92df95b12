package docgen

import (
	"github.com/spf13/cobra/doc"
)

var _ = doc.GenMarkdownTree
