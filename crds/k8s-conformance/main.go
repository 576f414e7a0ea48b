// Command k8s-conformance checks the generated InferencePool CRD with the Kubernetes API server's
// own code (k8s.io/apiextensions-apiserver): the CRD validation that `kubectl apply` of the CRD
// runs (structural schema, CEL compilation, CEL cost estimates), then, for each sample object,
// pruning, defaulting, schema validation, list-type validation and the CEL rules, in the order
// the API server applies them. Used by crds/k8s-conformance.test.ts (opt-in, needs Go).
//
// usage: k8s-conformance CRD.yaml [cases.json]
// cases.json: [{"name": ..., "doc": {...}}]; prints [{name, errors, celSkipped, object}] as JSON.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

type result struct {
	Name    string              `json:"name"`
	Errors  []map[string]string `json:"errors"`
	Blocked bool                `json:"celSkipped"`
	Object  interface{}         `json:"object"`
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

func main() {
	raw, err := os.ReadFile(os.Args[1])
	must(err)
	var v1 apiextensionsv1.CustomResourceDefinition
	must(yaml.UnmarshalStrict(raw, &v1))
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&v1)
	var crd apiextensions.CustomResourceDefinition
	must(apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1, &crd, nil))
	errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), &crd)
	if len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintln(os.Stderr, "CRD INVALID:", e.Error())
		}
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "CRD valid (structural, CEL compiled within cost limits)")
	if len(os.Args) < 3 {
		return
	}
	var props *apiextensions.JSONSchemaProps
	if crd.Spec.Versions[0].Schema != nil {
		props = crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	} else {
		props = crd.Spec.Validation.OpenAPIV3Schema
	}
	s, err := structuralschema.NewStructural(props)
	must(err)
	validator, _, err := apiservervalidation.NewSchemaValidator(props)
	must(err)
	celValidator := cel.NewValidator(s, true, celconfig.PerCallLimit)

	casesRaw, err := os.ReadFile(os.Args[2])
	must(err)
	var cases []struct {
		Name string                 `json:"name"`
		Doc  map[string]interface{} `json:"doc"`
	}
	dec := json.NewDecoder(bytes.NewReader(casesRaw))
	dec.UseNumber()
	must(dec.Decode(&cases))
	for _, c := range cases {
		convertNumbers(c.Doc)
	}
	var out []result
	for _, c := range cases {
		obj := c.Doc
		structuralpruning.Prune(obj, s, true)
		structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, s)
		structuraldefaulting.Default(obj, s)
		all := apiservervalidation.ValidateCustomResource(nil, obj, validator)
		all = append(all, structurallisttype.ValidateListSetsAndMaps(nil, s, obj)...)
		blocked := false
		for _, e := range all {
			if e.Type == field.ErrorTypeNotSupported || e.Type == field.ErrorTypeRequired || e.Type == field.ErrorTypeTooLong || e.Type == field.ErrorTypeTooMany || e.Type == field.ErrorTypeTypeInvalid {
				blocked = true
			}
		}
		if !blocked {
			celErrs, _ := celValidator.Validate(context.Background(), nil, s, obj, nil, celconfig.RuntimeCELCostBudget)
			all = append(all, celErrs...)
		}
		r := result{Name: c.Name, Blocked: blocked, Object: obj, Errors: []map[string]string{}}
		for _, e := range all {
			r.Errors = append(r.Errors, map[string]string{"path": e.Field, "type": string(e.Type), "detail": e.Detail, "error": e.Error()})
		}
		out = append(out, r)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	must(enc.Encode(out))
}

// convertNumbers turns the json.Numbers of a decoded object into int64 where they are whole and
// float64 otherwise, as the API server decodes a request body (k8s.io/apimachinery's json
// package): CEL then sees an integer field such as weight as an int, not a double.
func convertNumbers(v interface{}) interface{} {
	switch x := v.(type) {
	case map[string]interface{}:
		for k, item := range x {
			x[k] = convertNumbers(item)
		}
		return x
	case []interface{}:
		for i, item := range x {
			x[i] = convertNumbers(item)
		}
		return x
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, err := x.Float64()
		must(err)
		return f
	default:
		return v
	}
}
