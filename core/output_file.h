// output_file.h - checks on the files a command writes: an output must never name one of
// the command's inputs (or another of its outputs), however it is spelt, or writing it
// would destroy what is still to be read.
#pragma once

#include <string>
#include <vector>

namespace luma::core {

// True when the two paths name one file: the same device and inode when both exist (links
// and different spellings included), else the same weakly canonical path. "-" is standard
// output, never a file.
bool same_file(const std::string& a, const std::string& b);

// Throws std::runtime_error naming both when an output names the same file as an input or
// as another output: writing it would destroy the input before (or while) it is read.
void check_outputs_distinct(const std::vector<std::string>& inputs,
                            const std::vector<std::string>& outputs);

}  // namespace luma::core
