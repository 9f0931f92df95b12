// Package docgen writes the generated pages of docs/reference: the CLI's
// commands (cobra's doc generator over the command trees), the CRD API
// (from the CRDs' OpenAPI schemas in deploy/crds), the label, annotation
// and taint keys and the conditions and events defined in api/, and the
// metrics (from their descriptors, beside dcgm-exporter's equivalents).
// `make docs` runs it through TestReferenceIsCurrent with -update, and
// `make verify` fails when a committed page is stale.
//
// It reads the parts it documents and must not be imported by them.
package docgen
