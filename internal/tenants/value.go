package tenants

import (
	"errors"
	"strings"
	"unicode"
)

// ErrInvalid says a tenant's value can never be sent (docs/protocol.md
// section 10.1, "Tenant values"): its rows wait, and the tenant's state
// says why.
var ErrInvalid = errors.New("tenants: the tenant's value is never sent")

// Invalid says why tenant's value must never be sent anywhere, "" when it
// may. {tenant} puts the value in a URL's path as one segment: escaped,
// "." and ".." are still the path's own segments (a gateway that
// normalizes paths sends /t/../batch outside the tenant's area), and ""
// and "." both land on another URL (/t/batch). A control character has no
// business in a value that names an account, and would be a header's or a
// log line's end.
func Invalid(tenant string) string {
	switch {
	case tenant == "":
		return "it is empty"
	case tenant == "." || tenant == "..":
		return "it is " + tenant + ", a path segment of its own"
	case strings.ContainsFunc(tenant, unicode.IsControl):
		return "it holds a control character"
	}
	return ""
}
