"""The @wasm environment: WASI modules run by wasmtime (`environment.WasmEnvironment`).

`request` is what a call asks for and gets back, `limits` what it may take, `traps` the error a
module that fails gets; `compile` compiles modules in a process killed at the deadline, `cache`
keeps them on disk; `output` drains a call's stdout and stderr; `epoch` stops a module at its
deadline or when cancelled, `clocks` is the `poll_oneoff` and `clock_time_get` codecoder supplies
so that a sleep does too, and `fifos` frees a call blocked in the host on a FIFO.
"""
