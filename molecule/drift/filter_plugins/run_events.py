"""Test-only filters: what a nested ansible-playbook run (json callback document) ran on one host."""


def ran_on(document, host):
    """Names (without the role prefix) of the tasks and handlers that ran on `host`, in the order they
    ran; a task skipped there, or not run there at all, is left out."""
    names = []
    for play in (document or {}).get("plays") or []:
        for task in play.get("tasks") or []:
            result = (task.get("hosts") or {}).get(host)
            if result is None or result.get("skipped"):
                continue
            names.append(task["task"]["name"].split(" : ")[-1])
    return names


def results_on(document, task_name, host):
    """The results on `host` of the tasks named `task_name` (without the role prefix) that ran there."""
    found = []
    for play in (document or {}).get("plays") or []:
        for task in play.get("tasks") or []:
            result = (task.get("hosts") or {}).get(host)
            if result is None or result.get("skipped") or task["task"]["name"].split(" : ")[-1] != task_name:
                continue
            found.append(result)
    return found


class FilterModule:
    def filters(self):
        return {"ran_on": ran_on, "results_on": results_on}
