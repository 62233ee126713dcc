#include "cli/help.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include "cli/commands.h"
#include "gflags/gflags.h"

namespace ductile::cli {
namespace {

constexpr size_t kHelpWidth = 80;

// Appends `head`, then `text` word-wrapped to kHelpWidth columns from
// column `column` on, so that the texts of a list line up.
void AppendWrapped(const std::string& head, size_t column,
                   const std::string& text, std::string* out) {
  std::string line = head;
  if (line.size() >= column) {
    *out += line + "\n";
    line.clear();
  }
  line.resize(column, ' ');
  bool line_empty = true;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find(' ', start), text.size());
    const std::string word = text.substr(start, end - start);
    start = end + 1;
    if (word.empty()) continue;
    if (!line_empty && line.size() + 1 + word.size() > kHelpWidth) {
      *out += line + "\n";
      line.assign(column, ' ');
      line_empty = true;
    }
    if (!line_empty) line += ' ';
    line += word;
    line_empty = false;
  }
  *out += line + "\n";
}

// A flag's default as one would type it: gflags keeps a double's 17
// digits (0.050000000000000003).
std::string DefaultText(const gflags::CommandLineFlagInfo& info) {
  if (info.type == "string") return "\"" + info.default_value + "\"";
  if (info.type == "double") {
    char buf[32];
    const double value = std::strtod(info.default_value.c_str(), nullptr);
    return std::string(buf, std::to_chars(buf, buf + sizeof(buf), value).ptr);
  }
  return info.default_value;
}

// Whether `text` is a list of commands, "coordinator, local".
bool NamesCommands(const std::string& text) {
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(", ", start), text.size());
    if (FindCommand(text.substr(start, comma - start)) == nullptr) return false;
    start = comma + 2;
  }
  return true;
}

// Describes `flags` with their descriptions and defaults as gflags has
// them, so that they are written once, at their DEFINE.
void AppendFlags(std::span<const char* const> flags, std::string* out) {
  size_t longest = 0;
  for (const char* name : flags) longest = std::max(longest, std::strlen(name));
  for (const char* name : flags) {
    const gflags::CommandLineFlagInfo info =
        gflags::GetCommandLineFlagInfoOrDie(name);
    // The roles a description starts with ("coordinator, local: ...") go
    // without saying under one command.
    std::string text = info.description;
    if (const size_t colon = text.find(": ");
        colon != std::string::npos && NamesCommands(text.substr(0, colon))) {
      text = text.substr(colon + 2);
    }
    // An empty or false default says nothing.
    if (info.default_value != "" && info.default_value != "false") {
      text += " (default: " + DefaultText(info) + ")";
    }
    AppendWrapped(std::string("  --") + name, longest + 6, text, out);
  }
}

// Names `flags`, wrapped, with no descriptions.
void AppendFlagNames(std::span<const char* const> flags, std::string* out) {
  std::string names;
  for (const char* name : flags) {
    names += names.empty() ? "" : " ";
    names += std::string("--") + name;
  }
  AppendWrapped("", 4, names, out);
}

// Command summaries start past the longest command name.
constexpr size_t kSummaryColumn = 18;

std::string CommandNames() {
  std::string names;
  for (const Command& c : Commands()) {
    names += names.empty() ? "" : ", ";
    names += c.name;
  }
  return names;
}

std::string CommandHelp(const Command& c, bool all) {
  std::string out = std::string("usage: ductile ") + c.name + " [--flags]";
  if (c.operand != nullptr) out += std::string(" ") + c.operand;
  if (c.after_dashes != nullptr) {
    out += std::string(" [-- ") + c.after_dashes + "]";
  }
  out += "\n";
  AppendWrapped("", 0, std::string(c.summary) + ". " + c.details, &out);
  out += "\nflags:\n";
  AppendFlags(c.flags, &out);
  const std::span<const char* const> training = TrainingFlags();
  if (c.trains) {
    out += "training flags (the workers' app):\n";
    AppendFlags(training.first(kCommonTrainingFlags), &out);
  }
  std::vector<const char*> more = c.advanced;
  if (c.trains) {
    more.insert(more.end(), training.begin() + kCommonTrainingFlags,
                training.end());
  }
  if (more.empty()) return out;
  if (all) {
    out += "more flags:\n";
    AppendFlags(more, &out);
  } else {
    out += std::string("more flags (`ductile help ") + c.name +
           " --all` describes them):\n";
    AppendFlagNames(more, &out);
  }
  return out;
}

}  // namespace

std::string Usage() {
  std::string out =
      "usage: ductile <command> [--flags]\n"
      "\n"
      "commands:\n";
  for (const Command& c : Commands()) {
    AppendWrapped(std::string("  ") + c.name, kSummaryColumn, c.summary, &out);
  }
  out +=
      "\n"
      "apps: fmnist-logreg (the default), fmnist-mlp, mf\n"
      "example: ductile local --app=fmnist-mlp --servers=2 --workers=2 "
      "--epochs=15\n"
      "\n"
      "`ductile help <command>` shows a command's flags; `ductile --helpfull`\n"
      "lists every flag in the binary, the libraries' too.\n";
  return out;
}

int PrintHelp(const std::string& command, bool all) {
  if (command.empty()) {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  const Command* c = FindCommand(command);
  if (c == nullptr) {
    std::fprintf(stderr, "ductile: unknown command '%s' (commands: %s)\n",
                 command.c_str(), CommandNames().c_str());
    return 2;
  }
  std::fputs(CommandHelp(*c, all).c_str(), stdout);
  return 0;
}

}  // namespace ductile::cli
