// Package pkgtest tests what scripts/package.sh builds, as an operator
// meets it: the .deb installed, run, upgraded, removed and purged on this
// machine (as root), the rpm's metadata, the container image unpacked and run
// as its user, and the Helm chart linted and decoded strictly into the
// Kubernetes API's types. It has no code but its tests; it lives in the tools
// module so that the Kubernetes and packaging modules stay out of the
// agent's go.mod.
package pkgtest
