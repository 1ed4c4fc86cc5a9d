// Package e2e holds end-to-end tests of the export pipeline: real
// PostgreSQL (a schema per test), the project's fake third party over real
// HTTP, and daemons running in-process exactly as `syncer run` runs them.
package e2e
