"""The molecule scenarios' durations, as a table at the end of `make test` / `make molecule`: where the minutes go."""


def pytest_terminal_summary(terminalreporter):
    from test_scenarios import DURATIONS  # pylint: disable=import-outside-toplevel
    if not DURATIONS:
        return
    terminalreporter.section("molecule scenarios: seconds")
    for scenario, returncode, seconds in DURATIONS:
        terminalreporter.write_line("%-16s %6.0f  %s" % (scenario, seconds, "ok" if returncode == 0 else "FAILED"))
    terminalreporter.write_line("%-16s %6.0f  (%.1f min)" % ("total", sum(s for _n, _r, s in DURATIONS),
                                                            sum(s for _n, _r, s in DURATIONS) / 60))
