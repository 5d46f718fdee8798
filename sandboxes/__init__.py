"""What runs inside the sandboxes, and what attacks them: the `fileops` WASI module, the Landlock
worker (`landlock`), the sandbox image's agent and its `runas` helper (`image/`, not a Python
package: it runs inside the container), and the escape suite behind `codecoder audit`
(`escapes`). `build.sh` rebuilds the committed binaries."""
