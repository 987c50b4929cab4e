// Package fillzero sets the zero fields of a struct from another value of
// the same type. Tests that spell out only the settings they vary use it to
// take every other one from the configuration's defaults (proxy.Defaults),
// so that no test restates a default.
package fillzero

import "reflect"

// Fill sets every exported field of *dst that holds its zero value to
// src's. A non-nil pointer to a struct, and a struct, are filled field by
// field the same way; a nil pointer gets a copy of what src's points to, so
// dst never shares memory with src.
func Fill[T any](dst *T, src T) {
	fill(reflect.ValueOf(dst).Elem(), reflect.ValueOf(src))
}

func fill(d, s reflect.Value) {
	for i := range d.NumField() {
		f, sf := d.Field(i), s.Field(i)
		if !f.CanSet() {
			continue
		}
		switch {
		case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Struct:
			if sf.IsNil() {
				continue
			}
			cp := reflect.New(f.Type().Elem())
			if f.IsNil() {
				cp.Elem().Set(sf.Elem())
			} else {
				cp.Elem().Set(f.Elem())
				fill(cp.Elem(), sf.Elem())
			}
			f.Set(cp)
		case f.Kind() == reflect.Struct:
			fill(f, sf)
		case f.IsZero():
			f.Set(sf)
		}
	}
}
