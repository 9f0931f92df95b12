package cliutil

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// Format is an output format chosen with -o.
type Format string

// Output formats. Every command whose output is structured takes all four
// (AddOutputFlag): table for people, wide for people with more columns,
// json and yaml for programs.
const (
	Table Format = "table"
	Wide  Format = "wide"
	JSON  Format = "json"
	YAML  Format = "yaml"
)

// Formats lists the output formats in the order help texts name them.
var Formats = []Format{Table, Wide, JSON, YAML}

// OutputFlagAnnotation marks a command's -o flag as the shared one, so
// that tests walking the command tree find every command that has it.
const OutputFlagAnnotation = "gpuplane.io/output-formats"

// outputValue is -o's value: one of Formats, checked when the flag is
// parsed, so that an unknown format is a usage error naming the allowed
// ones before the command does anything.
type outputValue struct{ f *Format }

func (v outputValue) String() string { return string(*v.f) }
func (v outputValue) Type() string   { return "format" }
func (v outputValue) Set(s string) error {
	f := Format(strings.ToLower(strings.TrimSpace(s)))
	if !slices.Contains(Formats, f) {
		return fmt.Errorf("unknown output format %q: want one of %s", s, formatNames())
	}
	*v.f = f
	return nil
}

func formatNames() string {
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

// AddOutputFlag registers -o/--output on cmd with default def and returns
// where the chosen format is kept. what says what table and wide show,
// for the flag's help ("" for the plain help).
func AddOutputFlag(cmd *cobra.Command, def Format, what string) *Format {
	f := def
	help := fmt.Sprintf("output format: %s (default %s)", formatNames(), def)
	if what != "" {
		help += "; " + what
	}
	cmd.Flags().VarP(outputValue{&f}, "output", "o", help)
	fl := cmd.Flags().Lookup("output")
	fl.DefValue = string(def)
	if err := cmd.Flags().SetAnnotation("output", OutputFlagAnnotation, []string{formatNames()}); err != nil {
		panic(err) // the flag was registered just above
	}
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		out := make([]cobra.Completion, len(Formats))
		for i, f := range Formats {
			out[i] = string(f)
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	})
	return &f
}

// Data reports whether f is a data format (json or yaml).
func (f Format) Data() bool { return f == JSON || f == YAML }

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
