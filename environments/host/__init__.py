"""What the environments that run host processes share: which program a name runs and whether a
sandbox could have put it there (`path`), git run so that nothing in the workspace makes it run
a program (`git`), and output capped head and tail (`output`)."""
