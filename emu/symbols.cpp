// emu/symbols.cpp: names for the emulator's messages and its report, from the executable's own .symtab
// (static functions included, which dladdr does not see), demangled, without their parameter lists:
//  - function_name(): a kernel or a call site by its address;
//  - tls_symbol_at(), tls_symbol_offset(): a thread-local variable by its offset in the static TLS block
//    or by its mangled name; __shared__ variables are thread_local here, and emu/racecheck.cpp names them.
// The table is read at the first lookup and never freed: the report at exit still names functions. An
// executable without a symbol table gets addresses in its messages.
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "emu.h"

namespace emu {

struct Symbol {
    uintptr_t start, size;
    std::string name;
};

// "void f<8>(float*, int)" -> "f<8>": the demangled name without its parameter list and a template's return
// type.
static std::string short_name(const char *mangled) {
    int status = 0;
    char *demangled = abi::__cxa_demangle(mangled, NULL, NULL, &status);
    std::string name = status == 0 && demangled ? demangled : mangled;
    free(demangled);
    int depth = 0;
    size_t cut = name.size(), start = 0;
    for (size_t c = 0; c < name.size(); c++) {
        char ch = name[c];
        if (ch == '<') depth++;
        if (ch == '>') depth--;
        if (ch == '(' && depth == 0 && c > 0) {
            cut = c;
            break;
        }
        if (ch == ' ' && depth == 0) start = c + 1;
    }
    if (start >= cut) start = 0;
    return name.substr(start, cut - start);
}

// "f(float*, int)::red" -> "f::red": a function-local static's demangled name without parameter lists.
static std::string variable_name(const char *mangled) {
    int status = 0;
    char *demangled = abi::__cxa_demangle(mangled, NULL, NULL, &status);
    std::string full = status == 0 && demangled ? demangled : mangled, name;
    free(demangled);
    int depth = 0;
    for (char ch : full) {
        if (ch == '(') depth++;
        if (depth == 0) name += ch;
        if (ch == ')') depth--;
    }
    return name;
}

// The executable's functions (at their load addresses) and its thread-local variables (at their offsets in
// the static TLS block: __shared__ variables are thread_local here), each sorted by start.
struct SymbolTable {
    std::vector<Symbol> functions, tls;
    std::map<std::string, uintptr_t> tls_by_mangled_name;
};

static SymbolTable load_symbols(void) {
    SymbolTable table;
    std::vector<Symbol> &symbols = table.functions;
    int fd = open("/proc/self/exe", O_RDONLY);
    if (fd < 0) return table;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return table;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return table;
    const char *file = (const char *)map;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)file;
    Dl_info info;
    uintptr_t base = 0;
    if (eh->e_type == ET_DYN && dladdr((void *)&load_symbols, &info)) base = (uintptr_t)info.dli_fbase;
    const Elf64_Shdr *sections = (const Elf64_Shdr *)(file + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sections[i].sh_type != SHT_SYMTAB) continue;
        const Elf64_Sym *syms = (const Elf64_Sym *)(file + sections[i].sh_offset);
        const char *names = file + sections[sections[i].sh_link].sh_offset;
        size_t count = sections[i].sh_size / sizeof(Elf64_Sym);
        for (size_t k = 0; k < count; k++) {
            const int type = ELF64_ST_TYPE(syms[k].st_info);
            const char *mangled = names + syms[k].st_name;
            if (type == STT_TLS) {
                table.tls.push_back(Symbol{syms[k].st_value, syms[k].st_size, variable_name(mangled)});
                table.tls_by_mangled_name[mangled] = syms[k].st_value;
            }
            if (type != STT_FUNC || syms[k].st_size == 0) continue;
            symbols.push_back(Symbol{base + syms[k].st_value, syms[k].st_size, short_name(mangled)});
        }
    }
    munmap(map, (size_t)st.st_size);
    auto by_start = [](const Symbol &a, const Symbol &b) { return a.start < b.start; };
    std::sort(symbols.begin(), symbols.end(), by_start);
    std::sort(table.tls.begin(), table.tls.end(), by_start);
    return table;
}

static const SymbolTable &symbol_table(void) {
    static std::mutex mutex;
    static SymbolTable *table; // never destroyed: the report at exit still names functions
    std::lock_guard<std::mutex> lock(mutex);
    if (!table) table = new SymbolTable(load_symbols());
    return *table;
}

// The symbol of `symbols` that holds a, or NULL.
static const Symbol *symbol_at(const std::vector<Symbol> &symbols, uintptr_t a) {
    auto it = std::upper_bound(symbols.begin(), symbols.end(), a,
                               [](uintptr_t v, const Symbol &s) { return v < s.start; });
    if (it != symbols.begin() && a < (it - 1)->start + std::max<uintptr_t>((it - 1)->size, 1))
        return &*(it - 1);
    return NULL;
}

std::string function_name(const void *address) {
    const Symbol *s = symbol_at(symbol_table().functions, (uintptr_t)address);
    if (s) return s->name;
    char buf[32];
    snprintf(buf, sizeof(buf), "%p", address);
    return buf;
}

std::string tls_symbol_at(size_t offset, size_t *start) {
    const Symbol *s = symbol_at(symbol_table().tls, offset);
    if (!s) return "";
    *start = s->start;
    return s->name;
}

size_t tls_symbol_offset(const char *mangled) {
    const SymbolTable &t = symbol_table();
    auto it = t.tls_by_mangled_name.find(mangled);
    if (it == t.tls_by_mangled_name.end())
        fatal("the executable's symbol table has no TLS symbol %s", mangled);
    return it->second;
}

} // namespace emu
