// PropsDump prints what java.util.Properties.load makes of each file named on
// the command line, for comparing sluice's parser with Java's
// (TestParsePropertiesMatchesJava runs it when java is on the PATH):
//
//	java PropsDump.java FILE...
//
// For each file it prints "== FILE", then either "error: MESSAGE" or one line
// per property, sorted by key: ESCAPED_KEY=ESCAPED_VALUE, where every char
// outside printable ASCII (and '\', '=') is written as backslash, u, four hex digits. The file is
// decoded as UTF-8, as sluice does; a leading byte order mark is dropped and
// lone surrogates become U+FFFD, the two places where sluice differs on
// purpose.
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;

public class PropsDump {
  public static void main(String[] args) throws IOException {
    StringBuilder out = new StringBuilder();
    for (String f : args) {
      out.append("== ").append(f).append('\n');
      String text = new String(Files.readAllBytes(Paths.get(f)), StandardCharsets.UTF_8);
      if (text.startsWith("\uFEFF")) {
        text = text.substring(1);
      }
      Properties p = new Properties();
      try {
        p.load(new StringReader(text));
      } catch (IllegalArgumentException e) {
        out.append("error: ").append(e.getMessage()).append('\n');
        continue;
      }
      for (String k : new TreeSet<>(p.stringPropertyNames())) {
        out.append(esc(k)).append('=').append(esc(p.getProperty(k))).append('\n');
      }
    }
    System.out.print(out);
  }

  static String esc(String s) {
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (Character.isHighSurrogate(c) && i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
        b.append(String.format("\\u%04X\\u%04X", (int) c, (int) s.charAt(i + 1)));
        i++;
        continue;
      }
      if (Character.isSurrogate(c)) {
        c = '\uFFFD';
      }
      if (c >= 0x20 && c < 0x7f && c != '\\' && c != '=') {
        b.append(c);
      } else {
        b.append(String.format("\\u%04X", (int) c));
      }
    }
    return b.toString();
  }
}
