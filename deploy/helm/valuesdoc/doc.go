// Package valuesdoc writes a Helm chart's README from the comments in its
// values.yaml, so that the values and their documentation cannot part.
//
// The comment above a key documents it; a comment block that starts with
// "## Title" opens a README section, its other lines introducing it; the
// comment at the top of the file introduces the README. A key whose value is
// a mapping with documented keys is a group and every key in it must be
// documented; any other value (a scalar, a list, a mapping of undocumented
// keys such as an affinity) is one row of the section's table, with its
// default. It reads files only; it must not render the chart.
package valuesdoc
