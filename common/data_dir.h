// Where vtpu finds the files it ships (datasets, model files, traces), so that the installed
// program, a build-tree program and a test all read the same files without a path argument.
//
// A shipped file has a name under a data directory ("digits.csv.gz", "models/mlp.json") and a
// place in the source tree ("data/digits.csv.gz", "examples/models/mlp.json"). The lookup tries,
// in order: $VTPU_DATA_DIR/<name>; <prefix>/share/vtpu/<name> for a program installed as
// <prefix>/bin/<program> (found through /proc/self/exe); <source tree>/<source path>, for runs
// from the build tree. `cmake --install` lays out share/vtpu that way.
#pragma once

#include <string>
#include <vector>

namespace vtpu {

/// The paths tried for a shipped file, in lookup order (no check that they exist). Thread-safe.
std::vector<std::string> data_file_candidates(const std::string& name,
                                              const std::string& source_path);

/// The first candidate that exists; if none does, the first candidate, so that the reader's
/// "cannot open" error names a path (data_file_lookup_note names them all). Thread-safe.
std::string find_data_file(const std::string& name, const std::string& source_path);

/// For a reader's "cannot open" error: " (looked in A, B, C)" when `path` is one of the
/// candidates (the default was used and nothing was found), else "". Thread-safe.
std::string data_file_lookup_note(const std::string& path, const std::string& name,
                                  const std::string& source_path);

/// A model file for `vtpu plan`: `path` when it exists, else the shipped model of the same file
/// name (models/<file name>; examples/models/ in the source tree) when that exists, else `path`.
/// So `vtpu plan examples/models/mlp.json` works from any directory once installed. Thread-safe.
std::string find_model_file(const std::string& path);

}  // namespace vtpu
