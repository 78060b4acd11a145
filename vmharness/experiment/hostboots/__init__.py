"""Host boots of a run: the host's kernel and command line as a variable, reached with kexec (the
plan, what each boot would load, the checks before anything is taken, the switch and the check on
arrival). docs/run.md "Host boots" and docs/safety.md say what each part promises."""
