package cliutil

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// Format is an output format chosen with -o.
type Format string

// Output formats.
const (
	Table Format = "table"
	Wide  Format = "wide"
	JSON  Format = "json"
	YAML  Format = "yaml"
)

// ParseFormat checks an -o value against the formats a command allows.
func ParseFormat(s string, allowed ...Format) (Format, error) {
	if s == "" {
		return allowed[0], nil
	}
	names := make([]string, len(allowed))
	for i, f := range allowed {
		if string(f) == s {
			return f, nil
		}
		names[i] = string(f)
	}
	return "", Usagef("-o %s: unknown output format (want one of %s)", s, strings.Join(names, ", "))
}

// Encode writes v as JSON (indented) or YAML.
func Encode(w io.Writer, f Format, v any) error {
	switch f {
	case JSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case YAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding yaml: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("format %q is not a data format", f)
}

// NewTable returns a tab-aligned writer for human tables; Flush it.
func NewTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}
