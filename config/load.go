package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/rotor-lb/rotor/internal/secret"
)

// Load reads, interpolates, decodes and validates the configuration file at
// path. Environment variables are read with getenv (os.Getenv when nil).
// Every problem found is reported as "file:line: path: message", one a line.
func Load(path string, getenv func(string) string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data, getenv)
}

// Parse is Load on bytes already read; name is used in messages. Its
// errors never show a URL's userinfo, even where they quote the input.
func Parse(name string, data []byte, getenv func(string) string) (*File, error) {
	f, err := parse(name, data, getenv)
	if err != nil {
		return nil, redacted{err}
	}
	return f, nil
}

// redacted is an error whose message has every URL's userinfo masked.
type redacted struct{ err error }

func (r redacted) Error() string { return secret.Text(r.err.Error()) }

func parse(name string, data []byte, getenv func(string) string) (*File, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	// ${VAR} references stand in the YAML as plain words while it is
	// parsed, so that one unquoted in flow style ({url: http://${HOST}:80})
	// is not read as a mapping; each is put back, and replaced, in the
	// scalar it belongs to.
	refs := map[string]string{}
	data = varRE.ReplaceAllFunc(data, func(ref []byte) []byte {
		token := fmt.Sprintf("rotorvar%dx%x", len(refs), len(data))
		refs[token] = string(ref)
		return []byte(token)
	})
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if root.Kind == 0 {
		return nil, fmt.Errorf("%s: the file is empty", name)
	}
	p := &parser{name: name, getenv: getenv, lines: map[string]int{}, refs: refs}
	p.walk(root.Content[0], reflect.TypeOf(File{}), "")
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	var f File
	if err := root.Content[0].Decode(&f); err != nil {
		return nil, p.decodeError(err)
	}
	misplaced := f.misplaced()
	f.applyDefaults()
	f.resolvePaths(filepath.Dir(name))
	var errs []error
	for _, pe := range append(misplaced, f.validate()...) {
		errs = append(errs, p.at(pe.path, pe.msg))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &f, nil
}

type parser struct {
	name   string
	getenv func(string) string
	lines  map[string]int    // config path -> line
	refs   map[string]string // stand-in word -> the ${VAR} it stands for
	errs   []error
}

// at formats an error at path, with the line of the longest prefix of
// path the file has.
func (p *parser) at(path, msg string) error {
	line := 0
	for q := path; q != ""; q = parentPath(q) {
		if l, ok := p.lines[q]; ok {
			line = l
			break
		}
	}
	if line == 0 {
		return fmt.Errorf("%s: %s: %s", p.name, path, msg)
	}
	return fmt.Errorf("%s:%d: %s: %s", p.name, line, path, msg)
}

func parentPath(path string) string {
	if i := strings.LastIndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return ""
}

var lineRE = regexp.MustCompile(`line (\d+): (.*)`)

// decodeError turns yaml's type errors into file:line: messages.
func (p *parser) decodeError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("%s: %v", p.name, err)
	}
	var errs []error
	for _, e := range te.Errors {
		if m := lineRE.FindStringSubmatch(e); m != nil {
			msg := strings.ReplaceAll(m[2], "!!str ", "")
			errs = append(errs, fmt.Errorf("%s:%s: %s", p.name, m[1], msg))
		} else {
			errs = append(errs, fmt.Errorf("%s: %s", p.name, e))
		}
	}
	return errors.Join(errs...)
}

var varRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// walk checks node against type t: every mapping key must be a field (the
// strictness yaml.v3's KnownFields gives a Decoder but not a Node),
// ${VAR} references are replaced in scalars, and each path's line is noted
// for later messages. Sequence items with a name are addressed by it:
// pools.app.endpoints.a.weight.
func (p *parser) walk(n *yaml.Node, t reflect.Type, path string) {
	if path != "" {
		p.lines[path] = n.Line
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.ScalarNode:
		p.interpolate(n, path)
		p.checkScalar(n, t, path)
	case yaml.MappingNode:
		switch t.Kind() {
		case reflect.Struct:
			fields := map[string]reflect.Type{}
			var names []string
			for i := range t.NumField() {
				f := t.Field(i)
				tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
				if tag != "" && tag != "-" {
					fields[tag] = f.Type
					names = append(names, tag)
				}
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				ft, ok := fields[k.Value]
				sub := join(path, k.Value)
				if !ok {
					p.lines[sub] = k.Line
					p.errs = append(p.errs, p.at(sub, fmt.Sprintf("unknown field (known: %s)", strings.Join(names, ", "))))
					continue
				}
				p.walk(v, ft, sub)
			}
		case reflect.Map:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p.walk(v, t.Elem(), join(path, k.Value))
			}
		}
	case yaml.SequenceNode:
		if t.Kind() != reflect.Slice {
			return // decode reports the type error
		}
		for i, item := range n.Content {
			p.walk(item, t.Elem(), path+itemKey(item, i))
		}
	case yaml.AliasNode:
		p.errs = append(p.errs, p.at(path, "aliases are not supported"))
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// itemKey addresses a sequence item: ".NAME" if it has a name, else "[i]".
func itemKey(item *yaml.Node, i int) string {
	if item.Kind == yaml.MappingNode {
		for j := 0; j+1 < len(item.Content); j += 2 {
			if item.Content[j].Value == "name" && item.Content[j+1].Kind == yaml.ScalarNode && item.Content[j+1].Value != "" {
				return "." + item.Content[j+1].Value
			}
		}
	}
	return "[" + strconv.Itoa(i) + "]"
}

var durationType = reflect.TypeOf(time.Duration(0))

// checkScalar checks that a scalar holds what its field takes, so that the
// error names the field: "pools.app.endpoints.a.weight: "two" is not a
// whole number".
func (p *parser) checkScalar(n *yaml.Node, t reflect.Type, path string) {
	var want string
	switch {
	case t == durationType:
		want = "a duration (250ms, 2s, 1m30s)"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		want = "a whole number"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		want = "a number"
	case t.Kind() == reflect.Bool:
		want = "true or false"
	default:
		return
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		p.errs = append(p.errs, p.at(path, fmt.Sprintf("%q is not %s", n.Value, want)))
	}
}

// interpolate replaces ${VAR} and ${VAR:-default} in a scalar. An unset or
// empty variable without a default is an error naming it: a route whose
// secret is missing must stop start-up, not start without it.
func (p *parser) interpolate(n *yaml.Node, path string) {
	for token, ref := range p.refs {
		if strings.Contains(n.Value, token) {
			n.Value = strings.ReplaceAll(n.Value, token, ref)
		}
	}
	if !strings.Contains(n.Value, "${") {
		return
	}
	var missing []string
	n.Value = varRE.ReplaceAllStringFunc(n.Value, func(ref string) string {
		m := varRE.FindStringSubmatch(ref)
		if v := p.getenv(m[1]); v != "" {
			return v
		}
		if m[2] != "" {
			return m[3]
		}
		missing = append(missing, m[1])
		return ""
	})
	for _, name := range missing {
		p.errs = append(p.errs, p.at(path, fmt.Sprintf("environment variable %s is not set", name)))
	}
	if n.Style == 0 {
		n.Tag = "" // resolve again: ${PORT} may stand for a number
	}
}

// names returns the names of items, for "did you mean" lists.
func names[T any](items []T, name func(T) string) []string {
	out := make([]string, 0, len(items))
	for _, it := range items {
		out = append(out, name(it))
	}
	slices.Sort(out)
	return out
}
