package v1

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// decodeInto fills v from raw (a value produced by encoding/json into any),
// rejecting unknown fields and naming the field of every error.
func decodeInto(path string, raw any, v reflect.Value) error {
	if v.Kind() == reflect.Pointer {
		if raw == nil {
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return decodeInto(path, raw, v.Elem())
	}
	if reflect.PointerTo(v.Type()).Implements(unmarshalerType) {
		return decodeLeaf(path, raw, v)
	}
	switch v.Kind() {
	case reflect.Struct:
		if raw == nil {
			return nil
		}
		m, ok := raw.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want a mapping, got %s", orTop(path), describe(raw))
		}
		fields := structFields(v.Type())
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			idx, ok := fields[k]
			if !ok {
				return unknownField(join(path, k), k, fields)
			}
			if err := decodeInto(join(path, k), m[k], v.Field(idx)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.Struct {
			return decodeLeaf(path, raw, v)
		}
		if raw == nil {
			return nil
		}
		list, ok := raw.([]any)
		if !ok {
			return fmt.Errorf("%s: want a list, got %s", orTop(path), describe(raw))
		}
		out := reflect.MakeSlice(v.Type(), len(list), len(list))
		for i, item := range list {
			if err := decodeInto(fmt.Sprintf("%s[%d]", path, i), item, out.Index(i)); err != nil {
				return err
			}
		}
		v.Set(out)
		return nil
	}
	return decodeLeaf(path, raw, v)
}

// decodeLeaf decodes a scalar, a list of scalars or a custom type.
func decodeLeaf(path string, raw any, v reflect.Value) error {
	b, err := json.Marshal(raw)
	if err != nil {
		return fmt.Errorf("%s: re-encoding value: %w", path, err)
	}
	if err := json.Unmarshal(b, v.Addr().Interface()); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%s: want %s, got %s", path, kindName(te.Type), describe(raw))
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint64, reflect.Uint32, reflect.Uint:
		return "a whole number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	}
	return "a " + t.Kind().String()
}

func describe(raw any) string {
	switch raw.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case nil:
		return "null"
	}
	b, _ := json.Marshal(raw)
	return string(b)
}

func structFields(t reflect.Type) map[string]int {
	out := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = i
	}
	return out
}

func unknownField(path, key string, fields map[string]int) error {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	if best := closest(key, names); best != "" {
		return fmt.Errorf("%s: unknown field %q (did you mean %q?)", path, key, best)
	}
	return fmt.Errorf("%s: unknown field %q (allowed: %s)", path, key, strings.Join(names, ", "))
}

// closest returns the candidate nearest to s when it is a plausible typo.
func closest(s string, candidates []string) string {
	best, bestD := "", 1<<30
	for _, c := range candidates {
		if strings.EqualFold(c, s) {
			return c
		}
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if d < bestD {
			best, bestD = c, d
		}
	}
	limit := 2
	if len(s) > 8 {
		limit = 3
	}
	if bestD <= limit {
		return best
	}
	return ""
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orTop(path string) string {
	if path == "" {
		return "config"
	}
	return path
}
