package thirdparty

// ParseQuotaForTest exposes the header parser to table tests that need no
// server.
var ParseQuotaForTest = parseQuota

// ParseRetryAfterForTest exposes the Retry-After parser likewise.
var ParseRetryAfterForTest = parseRetryAfter
