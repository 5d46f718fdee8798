"""The decision server, a fork server behind every served `codecoder` command: its protocol and
client (`protocol`, which the client imports alone, so nothing here may import more), the
server's process (`server`), the child forked for each request (`child`), how a peer's context
is compared (`peercontext`) and how the server notices its code changed (`codewatch`)."""
