// Python's string formatting: `"%s" % args` (printf style) and `"{}".format(...)`.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/chat/builtins.h"
#include "core/chat/interpreter.h"
#include "core/chat/py_str.h"

namespace petrel::chat {
namespace {

struct Spec {
  std::string fill = " ";
  char align = 0;  // < > ^ =
  char sign = '-';
  bool alternate = false;
  bool zero = false;
  int64_t width = -1;
  int64_t precision = -1;
  char grouping = 0;
  char type = 0;
};

std::string Pad(std::string body, const Spec& spec, char default_align) {
  const int64_t length = int64_t(CodePointCount(body));
  if (spec.width <= length) return body;
  const int64_t pad = std::min<int64_t>(spec.width, 1 << 20) - length;
  const char align = spec.align ? spec.align : default_align;
  std::string fill;
  auto repeat = [&](int64_t n) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += spec.fill;
    return out;
  };
  if (align == '<') return body + repeat(pad);
  if (align == '^') return repeat(pad / 2) + body + repeat(pad - pad / 2);
  if (align == '=' && !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) {
    return body.substr(0, 1) + repeat(pad) + body.substr(1);
  }
  return repeat(pad) + body;
}

std::string Group(const std::string& digits, char separator) {
  std::string out;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    if (i && (n - i) % 3 == 0) out += separator;
    out += digits[i];
  }
  return out;
}

Result<std::string> FormatNumber(const Value& value, Spec spec) {
  char type = spec.type;
  if (type == 0) type = value.is_float() ? 'r' : 'd';
  std::string body;
  bool negative = false;
  if (type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b' || type == 'c' ||
      type == 'n') {
    if (value.is_float()) {
      return Error("ValueError: Unknown format code '%c' for object of type 'float'", type);
    }
    const int64_t n = value.int_value();
    if (type == 'c') return Pad(EncodeUtf8(std::u32string(1, char32_t(n))), spec, '<');
    negative = n < 0;
    const uint64_t magnitude = negative ? uint64_t(0) - uint64_t(n) : uint64_t(n);
    const int base = type == 'x' || type == 'X' ? 16 : type == 'o' ? 8 : type == 'b' ? 2 : 10;
    if (magnitude == 0) body = "0";
    for (uint64_t m = magnitude; m; m /= uint64_t(base)) {
      body.insert(body.begin(), "0123456789abcdef"[m % uint64_t(base)]);
    }
    if (type == 'X') body = PyUpper(body);
    if (spec.grouping && base == 10) body = Group(body, spec.grouping);
    if (spec.alternate && base != 10) {
      body = std::string("0") + (base == 16 ? type : base == 8 ? 'o' : 'b') + body;
    }
  } else {
    double x = value.float_value();
    negative = std::signbit(x) && !std::isnan(x);
    x = std::fabs(x);
    char buf[512];
    const int precision = int(std::min<int64_t>(spec.precision < 0 ? 6 : spec.precision, 100));
    if (type == 'r') {
      body = spec.precision < 0 ? PyFloatRepr(x) : "";
      if (spec.precision >= 0) {
        std::snprintf(buf, sizeof(buf), "%.*g", std::max(precision, 1), x);
        body = buf;
      }
    } else if (type == 'f' || type == 'F' || type == '%') {
      std::snprintf(buf, sizeof(buf), "%.*f", precision, type == '%' ? x * 100 : x);
      body = buf;
      if (type == '%') body += "%";
    } else if (type == 'e' || type == 'E' || type == 'g' || type == 'G') {
      const char format[] = {'%', '.', '*', type, 0};
      std::snprintf(buf, sizeof(buf), format, precision, x);
      body = buf;
    } else {
      return Error("ValueError: Unknown format code '%c' for object of type '%s'", type,
                   value.TypeName());
    }
    if (spec.grouping) {
      const size_t dot = body.find_first_not_of("0123456789");
      body = Group(body.substr(0, dot), spec.grouping) +
             (dot == std::string::npos ? "" : body.substr(dot));
    }
  }
  std::string signed_body = negative ? "-" : spec.sign == '+' ? "+" : spec.sign == ' ' ? " " : "";
  signed_body += body;
  if (spec.zero && !spec.align) {
    spec.fill.assign(1, '0');
    spec.align = '=';
  }
  return Pad(std::move(signed_body), spec, '>');
}

Result<std::string> FormatValue(const Value& value, const Spec& spec) {
  if (value.is_number() && !(value.is_bool() && spec.type == 0)) {
    if (spec.type == 's') return Error("ValueError: Unknown format code 's' for number");
    return FormatNumber(value.is_bool() ? Value(value.int_value()) : value, spec);
  }
  if (spec.type != 0 && spec.type != 's') {
    return Error("ValueError: Unknown format code '%c' for object of type '%s'", spec.type,
                 value.TypeName());
  }
  std::string text = value.Str();
  if (spec.precision >= 0) {
    const std::u32string cps = DecodeUtf8(text);
    if (int64_t(cps.size()) > spec.precision) {
      text = EncodeUtf8(std::u32string_view(cps).substr(0, size_t(spec.precision)));
    }
  }
  return Pad(std::move(text), spec, '<');
}

// Parses a format spec of the `str.format` mini-language.
Result<Spec> ParseSpec(const std::string& text) {
  Spec spec;
  const std::u32string cps = DecodeUtf8(text);
  size_t i = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (cps.size() >= 2 && is_align(cps[1])) {
    spec.fill = EncodeUtf8(cps.substr(0, 1));
    spec.align = char(cps[1]);
    i = 2;
  } else if (!cps.empty() && is_align(cps[0])) {
    spec.align = char(cps[0]);
    i = 1;
  }
  if (i < cps.size() && (cps[i] == '+' || cps[i] == '-' || cps[i] == ' '))
    spec.sign = char(cps[i++]);
  if (i < cps.size() && cps[i] == '#') spec.alternate = (++i, true);
  if (i < cps.size() && cps[i] == '0') spec.zero = (++i, true);
  auto number = [&]() {
    int64_t n = -1;
    while (i < cps.size() && cps[i] >= '0' && cps[i] <= '9') {
      n = std::min<int64_t>((n < 0 ? 0 : n) * 10 + int64_t(cps[i++] - '0'), 1 << 20);
    }
    return n;
  };
  spec.width = number();
  if (i < cps.size() && (cps[i] == ',' || cps[i] == '_')) spec.grouping = char(cps[i++]);
  if (i < cps.size() && cps[i] == '.') {
    ++i;
    spec.precision = number();
    if (spec.precision < 0) return Error("ValueError: Format specifier missing precision");
  }
  if (i < cps.size()) spec.type = char(cps[i++]);
  if (i != cps.size()) return Error("ValueError: Invalid format specifier");
  return spec;
}

}  // namespace

Result<std::string> PercentFormat(const std::string& format, const Value& args) {
  std::vector<Value> positional;
  const Value* mapping = nullptr;
  if (args.is_list() && args.list().kind == SeqKind::kTuple) {
    positional = args.list().items;
  } else if (args.is_dict()) {
    mapping = &args;
    positional.push_back(args);
  } else {
    positional.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) return Error("ValueError: incomplete format");
    const Value* value = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos || !mapping) {
        return Error("TypeError: format requires a mapping");
      }
      value = mapping->dict().Find(std::string_view(format).substr(i + 1, close - i - 1));
      if (!value) return Error("KeyError: '%s'", format.substr(i + 1, close - i - 1).c_str());
      used_mapping = true;
      i = close + 1;
    }
    Spec spec;
    for (; i < format.size() && strchr("-+ #0", format[i]); ++i) {
      if (format[i] == '-') spec.align = '<';
      if (format[i] == '+' || format[i] == ' ') spec.sign = format[i];
      if (format[i] == '#') spec.alternate = true;
      if (format[i] == '0') spec.zero = true;
    }
    for (; i < format.size() && isdigit(uint8_t(format[i])); ++i) {
      spec.width =
          std::min<int64_t>((spec.width < 0 ? 0 : spec.width) * 10 + (format[i] - '0'), 1 << 20);
    }
    if (i < format.size() && format[i] == '.') {
      spec.precision = 0;
      for (++i; i < format.size() && isdigit(uint8_t(format[i])); ++i) {
        spec.precision = std::min<int64_t>(spec.precision * 10 + (format[i] - '0'), 1 << 20);
      }
    }
    while (i < format.size() && strchr("hlL", format[i])) ++i;
    if (i >= format.size()) return Error("ValueError: incomplete format");
    const char type = format[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    if (!value) {
      if (next >= positional.size()) {
        return Error("TypeError: not enough arguments for format string");
      }
      value = &positional[next++];
    }
    if (spec.align == '<') spec.zero = false;
    Value converted = *value;
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        spec.type = 0;
        spec.zero = false;
        if (!spec.align) spec.align = '>';
        PETREL_ASSIGN_OR_RETURN(
            std::string piece,
            FormatValue(Value(type == 's' ? value->Str() : value->Repr()), spec));
        out += piece;
        continue;
      }
      case 'd':
      case 'i':
      case 'u':
        if (!value->is_number()) {
          return Error("TypeError: %%%c format: a real number is required, not %s", type,
                       value->TypeName());
        }
        converted = Value(value->is_float() ? int64_t(value->float_value()) : value->int_value());
        spec.type = 'd';
        break;
      case 'x':
      case 'X':
      case 'o':
      case 'c':
        if (!value->is_int() && !value->is_bool()) {
          return Error("TypeError: %%%c format: an integer is required, not %s", type,
                       value->TypeName());
        }
        spec.type = type;
        break;
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
        if (!value->is_number()) {
          return Error("TypeError: must be real number, not %s", value->TypeName());
        }
        converted = Value(value->float_value());
        spec.type = type;
        break;
      default:
        return Error("ValueError: unsupported format character '%c'", type);
    }
    PETREL_ASSIGN_OR_RETURN(std::string piece, FormatValue(converted, spec));
    out += piece;
  }
  if (!used_mapping && !mapping && next < positional.size()) {
    return Error("TypeError: not all arguments converted during string formatting");
  }
  return out;
}

Result<std::string> BraceFormat(Interpreter& interp, const std::string& format, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      return Error("ValueError: Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = format.find('}', i);
    if (close == std::string::npos)
      return Error("ValueError: Single '{' encountered in format string");
    std::string field = format.substr(i + 1, close - i - 1);
    i = close;
    std::string spec_text;
    char conversion = 0;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      spec_text = field.substr(colon + 1);
      field.resize(colon);
    }
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : 0;
      field.resize(bang);
    }
    // The first part names an argument; then `.attr` and `[key]` parts.
    size_t end = field.find_first_of(".[");
    const std::string head = field.substr(0, end);
    Value value;
    if (head.empty()) {
      if (auto_index >= args.positional.size()) {
        return Error("IndexError: Replacement index %zu out of range for positional args tuple",
                     auto_index);
      }
      value = args.positional[auto_index++];
    } else if (std::all_of(head.begin(), head.end(), [](char d) { return isdigit(uint8_t(d)); })) {
      const size_t index = head.size() > 6 ? SIZE_MAX : size_t(std::stoul(head));
      if (index >= args.positional.size()) {
        return Error("IndexError: Replacement index %s out of range for positional args tuple",
                     head.c_str());
      }
      value = args.positional[index];
    } else {
      bool found = false;
      for (auto& [key, named] : args.named) {
        if (key == head) {
          value = named;
          found = true;
        }
      }
      if (!found) return Error("KeyError: '%s'", head.c_str());
    }
    while (end != std::string::npos && end < field.size()) {
      if (field[end] == '.') {
        const size_t next = field.find_first_of(".[", end + 1);
        value = interp.GetAttr(
            value, field.substr(end + 1, next == std::string::npos ? next : next - end - 1));
        end = next;
      } else {
        const size_t bracket = field.find(']', end);
        if (bracket == std::string::npos) return Error("ValueError: Missing ']' in format string");
        const std::string key = field.substr(end + 1, bracket - end - 1);
        const bool numeric =
            !key.empty() && key.size() < 10 &&
            std::all_of(key.begin(), key.end(), [](char d) { return isdigit(uint8_t(d)); });
        value = interp.GetItem(value, numeric ? Value(int64_t(std::stoll(key))) : Value(key));
        end = bracket + 1;
      }
      if (value.is_undefined()) return ErrorMessage(UndefinedMessage(value));
    }
    if (conversion == 'r' || conversion == 'a') value = Value(value.Repr());
    if (conversion == 's') value = Value(value.Str());
    PETREL_ASSIGN_OR_RETURN(Spec spec, ParseSpec(spec_text));
    PETREL_ASSIGN_OR_RETURN(std::string piece, FormatValue(value, spec));
    out += piece;
    PETREL_RETURN_IF_ERROR(interp.CheckSize(out.size()));
  }
  return out;
}

}  // namespace petrel::chat
