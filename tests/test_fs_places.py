"""util/fs's path identity: fs.relation / fs.same_place tell whether two user paths are one
place, or one lies inside the other, for every spelling (local, file:// URLs with any number of
slashes, `..`, symlinks, the scheme's case, gs/s3/hdfs/ram after normalising); fs.check_spelling
refuses the file:// URLs TensorFlow would read otherwise than meant; fs.replace and atomic
writes take a file:// URL for the local disk it names (one rename)."""
import os

import pytest

from util import fs, io_utils


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """tmp/d/sub, tmp/d/f.txt, tmp/link -> d, tmp/hard.txt (a hard link of f.txt); cwd = tmp."""
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "f.txt").write_text("x")
    os.symlink(tmp_path / "d", tmp_path / "link")
    os.link(tmp_path / "d" / "f.txt", tmp_path / "hard.txt")
    monkeypatch.chdir(tmp_path)
    return str(tmp_path)


# (a, b, how a stands to b); {t} is the tree's absolute root (it starts with a slash).
LOCAL_TABLE = [
    ("{t}/d", "{t}/d", "same"),
    ("{t}/d", "{t}/d/", "same"),
    ("{t}/d", "{t}//d//", "same"),
    ("{t}/d", "{t}/d/sub/..", "same"),
    ("{t}/d", "{t}/./d", "same"),
    ("d", "{t}/d", "same"),                         # relative to the working directory
    ("{t}/d", "file://{t}/d", "same"),              # local path and file:// URL
    ("file://{t}/d", "file://{t}/d//", "same"),     # file:///x vs file:///x//
    ("{t}/d", "file:///{t}/d", "same"),             # file:////x: extra slashes after file://
    ("{t}/d", "FILE://{t}/d", "same"),              # scheme's case
    ("{t}/d", "File://{t}/d/sub/..", "same"),
    ("{t}/d", "file://localhost{t}/d", "same"),
    ("{t}/link", "{t}/d", "same"),                  # a symlink and its target
    ("file://{t}/link/", "{t}/d", "same"),
    ("{t}/hard.txt", "{t}/d/f.txt", "same"),        # a hard link of the same file
    ("{t}/d/sub", "{t}/d", "inside"),
    ("file://{t}/link/sub", "{t}/d", "inside"),
    ("{t}/d/sub/../f.txt", "file://{t}/d//", "inside"),
    ("{t}/d", "{t}/link/sub", "contains"),
    ("file://{t}", "d/f.txt", "contains"),
    ("{t}/d", "{t}/dd", None),                      # a common prefix is not containment
    ("{t}/d/sub", "{t}/d/f.txt", None),
    ("{t}/d", "gs:/{t}/d", None),
    ("{t}/missing/x", "{t}/missing/x/", "same"),    # places that do not exist yet compare too
    ("{t}/missing/x/y", "file://{t}/missing", "inside"),
]

URL_TABLE = [
    ("gs://b/a", "gs://b/a/", "same"),
    ("gs://b//a", "gs://b/a", "same"),
    ("gs://b/a/./c/..", "gs://b/a", "same"),
    ("GS://b/a", "gs://b/a", "same"),
    ("gs://b/a/c", "gs://b/a//", "inside"),
    ("gs://b", "gs://b/a/c", "contains"),
    ("gs://b/ab", "gs://b/a", None),
    ("gs://b/a", "s3://b/a", None),
    ("gs://b/a", "/b/a", None),
    ("s3://b/x/../y", "s3://b/y/", "same"),
    ("hdfs://nn:8020/x//y", "hdfs://nn:8020/x/y", "same"),
    ("hdfs://nn:8020/x/y", "hdfs://other:8020/x/y", None),
    ("ram://t/x", "ram://t/y/../x/", "same"),
    ("ram://t/x/y", "ram://t/x", "inside"),
]


@pytest.mark.parametrize("a, b, expected", LOCAL_TABLE)
def test_local_spellings_of_one_place(tree, a, b, expected):
    a, b = a.format(t=tree), b.format(t=tree)
    assert fs.relation(a, b) == expected
    opposite = {"inside": "contains", "contains": "inside"}.get(expected, expected)
    assert fs.relation(b, a) == opposite
    assert fs.same_place(a, b) == (expected == "same")


@pytest.mark.parametrize("a, b, expected", URL_TABLE)
def test_url_spellings_of_one_place(a, b, expected):
    assert fs.relation(a, b) == expected
    opposite = {"inside": "contains", "contains": "inside"}.get(expected, expected)
    assert fs.relation(b, a) == opposite


def test_a_relative_file_url_is_where_tensorflow_would_write(tree):
    # TensorFlow reads file://data/x as host "data", path /x: at the filesystem root.
    assert fs.local_path("file://data/x") == "/x"
    assert fs.same_place("file://data/x", "/x")


@pytest.mark.parametrize("path", ["file://relative/dir", "file://d/f.txt", "file://x"])
def test_a_file_url_with_a_relative_path_is_refused_showing_the_absolute_form(tree, path):
    with pytest.raises(ValueError) as e:
        fs.check_spelling(path, "--output")
    rest = path[len("file://"):]
    assert f"--output {path}: a file:// URL needs an absolute path" in str(e.value)
    assert f"Did you mean file://{tree}/{rest}" in str(e.value)


@pytest.mark.parametrize("path, suggestion", [("FILE:///x", "file:///x"),
                                              ("Gs://b/x", "gs://b/x")])
def test_a_scheme_not_in_lower_case_is_refused(path, suggestion):
    with pytest.raises(ValueError, match=f"write the scheme in lower case \\({suggestion}\\)"):
        fs.check_spelling(path, "--model-dir")


@pytest.mark.parametrize("path", ["/abs", "rel/x", "file:///abs", "file:////abs//",
                                  "file://localhost/abs", "gs://b/x", "ram://t", "hdfs://nn/x"])
def test_good_spellings_pass(path):
    fs.check_spelling(path, "--output")


def test_file_urls_are_renamed_and_written_as_the_local_disk(tmp_path, monkeypatch):
    renames = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: renames.append((a, b)) or real_replace(a, b))
    (tmp_path / "a").write_text("new")
    (tmp_path / "b").write_text("old")
    fs.replace(f"file://{tmp_path}/a", f"file:///{tmp_path}/b")
    assert renames == [(f"{tmp_path}/a", f"{tmp_path}/b")]
    assert (tmp_path / "b").read_text() == "new" and not (tmp_path / "a").exists()
    io_utils.write_text(f"file://{tmp_path}/c.txt", "text")
    assert (tmp_path / "c.txt").read_text() == "text"
    (tmp_replace,) = [b for _, b in renames[1:]]
    assert tmp_replace == f"{tmp_path}/c.txt"  # fsync'ed temporary renamed by os.replace
