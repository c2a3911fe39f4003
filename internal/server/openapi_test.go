package server

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// openAPIDoc is the part of the OpenAPI document the tests read.
type openAPIDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]schema `json:"schemas"`
	} `json:"components"`
}

type schema struct {
	Ref        string            `json:"$ref"`
	Type       schemaType        `json:"type"`
	Properties map[string]schema `json:"properties"`
	Required   []string          `json:"required"`
	Items      *schema           `json:"items"`
}

func loadOpenAPI(t *testing.T) openAPIDoc {
	t.Helper()
	var doc openAPIDoc
	if err := json.Unmarshal([]byte(api.OpenAPI), &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Errorf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	return doc
}

func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	s := New(&fakeSandboxes{}, &fakeSandboxes{}, nil, nil, Options{})
	var routes, documented []string
	for _, rt := range s.routes {
		if rt.method == anyMethod {
			// OpenAPI has no method wildcard nor a "{path...}": the route
			// is documented once per method, with a {path} parameter.
			for _, m := range anyMethodDocumented {
				routes = append(routes, m+" "+strings.ReplaceAll(rt.path, "...}", "}"))
			}
			continue
		}
		routes = append(routes, rt.method+" "+strings.ReplaceAll(rt.path, "...}", "}"))
	}
	for path, item := range doc.Paths {
		for method := range item {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(routes)
	sort.Strings(documented)
	if !slices.Equal(routes, documented) {
		t.Errorf("routes and document differ:\nserved:     %q\ndocumented: %q", routes, documented)
	}
}

// anyMethodDocumented are the methods the OpenAPI document lists for a
// route that serves every method.
var anyMethodDocumented = []string{"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"}

// TestRoutesMatchAPIDoc checks the route table against the one in
// docs/API.md.
func TestRoutesMatchAPIDoc(t *testing.T) {
	md, err := os.ReadFile("../../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for line := range strings.SplitSeq(string(md), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			continue
		}
		method := strings.TrimSpace(cells[1])
		path, _, _ := strings.Cut(strings.TrimSpace(cells[2]), "?")
		if method == "method" || strings.Trim(method, "-") == "" {
			continue
		}
		documented = append(documented, method+" "+path)
	}
	s := New(&fakeSandboxes{}, &fakeSandboxes{}, nil, nil, Options{})
	var routes []string
	for _, rt := range s.routes {
		routes = append(routes, rt.method+" "+rt.path)
	}
	sort.Strings(routes)
	sort.Strings(documented)
	if !slices.Equal(routes, documented) {
		t.Errorf("routes and docs/API.md differ:\nserved:     %q\ndocumented: %q", routes, documented)
	}
}

func TestOpenAPIRefsResolve(t *testing.T) {
	doc := loadOpenAPI(t)
	var all map[string]any
	json.Unmarshal([]byte(api.OpenAPI), &all)
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				if !resolves(all, ref) {
					t.Errorf("$ref %q does not resolve", ref)
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(all)
	if len(doc.Components.Schemas) == 0 {
		t.Error("no schemas")
	}
}

// resolves reports whether a local reference ("#/a/b") names a value of doc.
func resolves(doc map[string]any, ref string) bool {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return false
	}
	var cur any = doc
	for part := range strings.SplitSeq(rest, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[part]; !ok {
			return false
		}
	}
	return true
}

// TestOpenAPISchemasMatchTypes checks every body schema against the Go type
// the server sends or decodes: the same fields, the same JSON kinds, and as
// required exactly the fields that are always present (no omitempty).
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	doc := loadOpenAPI(t)
	types := map[string]reflect.Type{
		"Event":                   reflect.TypeFor[api.Event](),
		"Snapshot":                reflect.TypeFor[api.Snapshot](),
		"CreateSnapshotRequest":   reflect.TypeFor[api.CreateSnapshotRequest](),
		"RestoreRequest":          reflect.TypeFor[api.RestoreRequest](),
		"RestoreResult":           reflect.TypeFor[api.RestoreResult](),
		"ForkRequest":             reflect.TypeFor[api.ForkRequest](),
		"ForkResult":              reflect.TypeFor[api.ForkResult](),
		"GCRequest":               reflect.TypeFor[api.GCRequest](),
		"GCResult":                reflect.TypeFor[api.GCResult](),
		"DebugVars":               reflect.TypeFor[api.DebugVars](),
		"NetworkPolicy":           reflect.TypeFor[api.NetworkPolicy](),
		"NetworkStatus":           reflect.TypeFor[api.NetworkStatus](),
		"NetworkRule":             reflect.TypeFor[api.NetworkRule](),
		"Transform":               reflect.TypeFor[api.Transform](),
		"Secret":                  reflect.TypeFor[api.Secret](),
		"SetSecretRequest":        reflect.TypeFor[api.SetSecretRequest](),
		"SecretList":              reflect.TypeFor[api.SecretList](),
		"SandboxMetrics":          reflect.TypeFor[api.SandboxMetrics](),
		"Preview":                 reflect.TypeFor[api.Preview](),
		"SetPreviewRequest":       reflect.TypeFor[api.SetPreviewRequest](),
		"SnapshotList":            reflect.TypeFor[api.SnapshotList](),
		"Lineage":                 reflect.TypeFor[api.Lineage](),
		"ErrorBody":               reflect.TypeFor[api.ErrorBody](),
		"Error":                   reflect.TypeFor[api.Error](),
		"RuntimeInfo":             reflect.TypeFor[api.RuntimeInfo](),
		"NodeInfo":                reflect.TypeFor[api.NodeInfo](),
		"Sandbox":                 reflect.TypeFor[api.Sandbox](),
		"CreateSandboxRequest":    reflect.TypeFor[api.CreateSandboxRequest](),
		"SetTimeoutRequest":       reflect.TypeFor[api.SetTimeoutRequest](),
		"ExecRequest":             reflect.TypeFor[api.ExecRequest](),
		"ExecResult":              reflect.TypeFor[api.ExecResult](),
		"ExecEvent":               reflect.TypeFor[api.ExecEvent](),
		"StartedProcess":          reflect.TypeFor[api.StartedProcess](),
		"Process":                 reflect.TypeFor[api.Process](),
		"SignalRequest":           reflect.TypeFor[api.SignalRequest](),
		"PTYSize":                 reflect.TypeFor[api.PTYSize](),
		"FileInfo":                reflect.TypeFor[api.FileInfo](),
		"MkdirRequest":            reflect.TypeFor[api.MkdirRequest](),
		"MoveRequest":             reflect.TypeFor[api.MoveRequest](),
		"Template":                reflect.TypeFor[api.Template](),
		"TemplateBuildEvent":      reflect.TypeFor[api.TemplateBuildEvent](),
		"TemplateConfig":          reflect.TypeFor[api.TemplateConfig](),
		"CreateTemplateRequest":   reflect.TypeFor[api.CreateTemplateRequest](),
		"ImageSource":             reflect.TypeFor[api.ImageSource](),
		"ShareTemplateRequest":    reflect.TypeFor[api.ShareTemplateRequest](),
		"CreateKeyRequest":        reflect.TypeFor[api.CreateKeyRequest](),
		"Key":                     reflect.TypeFor[api.Key](),
		"KeyInfo":                 reflect.TypeFor[api.KeyInfo](),
		"RotateAgentTokensResult": reflect.TypeFor[api.RotateAgentTokensResult](),
		"KeyList":                 reflect.TypeFor[api.KeyList](),
		"FleetNode":               reflect.TypeFor[api.FleetNode](),
		"FleetNodeList":           reflect.TypeFor[api.FleetNodeList](),
		"Amounts":                 reflect.TypeFor[api.Amounts](),
		"Quota":                   reflect.TypeFor[api.Quota](),
		"PoolSpec":                reflect.TypeFor[api.PoolSpec](),
		"Pool":                    reflect.TypeFor[api.Pool](),
		"PoolNode":                reflect.TypeFor[api.PoolNode](),
		"MemoryImage":             reflect.TypeFor[api.MemoryImage](),
		"PoolList":                reflect.TypeFor[api.PoolList](),
		"Checkpoint":              reflect.TypeFor[api.Checkpoint](),
		"Restored":                reflect.TypeFor[api.Restored](),
		"Paused":                  reflect.TypeFor[api.Paused](),
		"Volume":                  reflect.TypeFor[api.Volume](),
		"SandboxList":             reflect.TypeFor[api.SandboxList](),
		"ProcessList":             reflect.TypeFor[api.ProcessList](),
		"FileList":                reflect.TypeFor[api.FileList](),
		"TemplateList":            reflect.TypeFor[api.TemplateList](),
		"Health": reflect.TypeFor[struct {
			Status string `json:"status"`
		}](),
	}
	for name := range doc.Components.Schemas {
		if _, ok := types[name]; !ok {
			t.Errorf("schema %s matches no Go type", name)
		}
	}
	for name, typ := range types {
		sc, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("no schema for %s", name)
			continue
		}
		var fields, required []string
		for _, f := range reflect.VisibleFields(typ) {
			if f.Anonymous { // an embedded struct's fields are the type's own
				continue
			}
			tag, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields = append(fields, tag)
			if !strings.Contains(opts, "omitempty") {
				required = append(required, tag)
			}
			prop, ok := sc.Properties[tag]
			if !ok {
				t.Errorf("%s: field %s not in the schema", name, tag)
				continue
			}
			if want := jsonKind(f.Type); !kindMatches(prop, want) {
				t.Errorf("%s.%s: schema %+v, want %s", name, tag, prop, want)
			}
			// A pointer always sent (no omitempty) may be null.
			if nullable := f.Type.Kind() == reflect.Pointer && !strings.Contains(opts, "omitempty"); nullable != prop.Type.nullable {
				t.Errorf("%s.%s: schema nullable %v, want %v", name, tag, prop.Type.nullable, nullable)
			}
		}
		if len(sc.Properties) != len(fields) {
			t.Errorf("%s: schema has %d properties, the type %d fields %v", name, len(sc.Properties), len(fields), fields)
		}
		got := slices.Clone(sc.Required)
		sort.Strings(got)
		sort.Strings(required)
		if !slices.Equal(got, required) {
			t.Errorf("%s: required %v, want %v", name, got, required)
		}
	}
}

// jsonKind is the JSON Schema type of values of t, or "$ref" for a struct.
func jsonKind(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[time.Time](), t == reflect.TypeFor[[]byte]():
		return "string"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Slice:
		return "array"
	case reflect.Map:
		return "object"
	case reflect.Struct:
		return "$ref"
	}
	return t.Kind().String()
}

func kindMatches(s schema, kind string) bool {
	if kind == "$ref" {
		return s.Ref != ""
	}
	return s.Type.main == kind
}

// schemaType is a schema's "type": one type, or a type and "null" (a
// field that is always present and may be null).
type schemaType struct {
	main     string
	nullable bool
}

func (t *schemaType) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		t.main = one
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return err
	}
	for _, v := range list {
		if v == "null" {
			t.nullable = true
		} else if t.main == "" {
			t.main = v
		} else {
			return fmt.Errorf("type %s: more than one type besides null", b)
		}
	}
	return nil
}
