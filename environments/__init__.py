"""Where a tool's work happens, one backend per module or package: `shell` (host processes),
`landlock` (kernel-confined reads), `docker` (hardened containers), `wasm` (WASI modules),
`inprocess` (@runtime), `mock` (for tests); `base` is what every environment offers (run a
request, close), `host` what the host-process environments share, and `workspaceguard` the
check of what a sandbox left in the workspace. Environments know nothing of permissions: by the
time a request reaches one, the dispatcher has decided."""
