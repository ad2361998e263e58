#!/usr/bin/python3
"""What ships beside the programs keeps up with them: xroce(8) and the bash completion name
every subcommand `xroce --help` lists; the maintainer scripts, build-deb and the completion
pass shellcheck; the completion completes subcommands and options when bash runs it.

Usage: test_docs.py XROCE PACKAGING_DIR
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path


def subcommands(xroce: str) -> list:
    out = subprocess.run([xroce, "--help"], stdout=subprocess.PIPE, text=True).stdout
    section = out.split("Subcommands:", 1)[1]
    return [m.group(1) for m in re.finditer(r"^\s+(\S+)\s", section, re.MULTILINE)]


def complete(completion: Path, words: list) -> list:
    """What the completion function offers for the last word of `xroce WORDS...`."""
    script = (f"source {completion}\n"
              f"COMP_WORDS=(xroce {' '.join(words)}); COMP_CWORD={len(words)}\n"
              "_xroce; printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    return subprocess.run(["bash", "-c", script], stdout=subprocess.PIPE, text=True,
                          env={"PATH": "/usr/bin:/bin"}).stdout.split()


def main() -> int:
    xroce, packaging = sys.argv[1], Path(sys.argv[2])
    failures = []
    names = subcommands(xroce)
    if len(names) < 10:
        failures.append(f"`xroce --help` lists only {names}")
    man = (packaging / "man/xroce.8").read_text()
    completion = packaging / "bash-completion/xroce"
    offered = complete(completion, [""])
    for name in names:
        # A command is documented when a .B/.BI/.BR line starts with it.
        if not re.search(rf'^\.(B|BI|BR) "?{re.escape(name)}[ "\n]', man, re.MULTILINE) and \
                not re.search(rf"^\.BR .*\b{re.escape(name)}\b", man, re.MULTILINE):
            failures.append(f"xroce.8 does not document `xroce {name}`")
        if name not in offered:
            failures.append(f"the bash completion does not offer `{name}`")
    if complete(completion, ["top", "--so"]) != ["--sort"]:
        failures.append(f"`xroce top --so<TAB>` offers {complete(completion, ['top', '--so'])}")
    if complete(completion, ["up", "--port", ""]) != ["afxdp", "udp"]:
        failures.append("`xroce up --port <TAB>` does not offer afxdp and udp")
    if shutil.which("shellcheck"):
        scripts = [packaging / "debian" / s for s in ("postinst", "prerm", "postrm")]
        for args in (["-s", "sh", *map(str, scripts)], ["-s", "bash", str(completion)],
                     [str(packaging / "build-deb")]):
            p = subprocess.run(["shellcheck", *args], stdout=subprocess.PIPE, text=True)
            if p.returncode != 0:
                failures.append(f"shellcheck {' '.join(args)}:\n{p.stdout}")
    else:
        failures.append("shellcheck is missing (ci/install-deps installs it)")
    for f in failures:
        print(f"FAILED: {f}")
    if not failures:
        print(f"PASSED: {len(names)} subcommands documented and completed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
