"""Reading nvidia-smi's options one at a time (test code, stdlib only): `--name=value`, `--name value` or
`-n value`, as the real tool takes them. Shared by the subcommands that parse their own options (dmon, mig)."""


class Options(object):
    """Iterate over the option names; value() takes the current option's value, ValueError(name) when none is
    left; has_value() says whether an optional value follows (given with `=`, or a next word that is no option)."""

    def __init__(self, argv):
        self.argv, self.i = list(argv), -1
        self.arg = self.name = self.inline = None
        self.eq = ""

    def __iter__(self):
        while self.i + 1 < len(self.argv):
            self.i += 1
            self.arg = self.argv[self.i]
            if self.arg.startswith("--"):
                self.name, self.eq, self.inline = self.arg.partition("=")
            else:
                self.name, self.eq, self.inline = self.arg, "", ""
            yield self.name

    def value(self):
        if self.eq:
            return self.inline
        self.i += 1
        if self.i >= len(self.argv):
            raise ValueError(self.name)
        return self.argv[self.i]

    def has_value(self):
        return bool(self.eq) or (self.i + 1 < len(self.argv) and not self.argv[self.i + 1].startswith("-"))
