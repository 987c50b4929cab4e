// JdbcCorpus runs statements with the PrestoDB JDBC driver (presto-jdbc)
// on one connection and prints what a JDBC application sees, so that the
// e2e tests can compare the proxy with a direct connection. Run it as a
// single-file program: java -cp presto-jdbc.jar JdbcCorpus.java URL USER < statements
//
// Input: one statement per line, or a directive:
//   !autocommit false|true     Connection.setAutoCommit (a transaction)
//   !commit | !rollback        Connection.commit / rollback
//   !prepared SQL ||| P1,P2    a PreparedStatement with string parameters
//   !cancel SQL                Statement.cancel once the query has started
// Output: per statement, "== N" then "columns\t<name:type>..." and one line
// per row (sorted unless the statement has ORDER BY), or "error\t<SQLState>\t<message>".
import java.sql.*;
import java.util.*;
import java.io.*;

public class JdbcCorpus {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.setProperty("user", args[1]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        try (Connection c = DriverManager.getConnection(args[0], p)) {
            String line;
            int n = 0;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) continue;
                out.println("== " + (n++) + " " + line);
                try {
                    if (line.startsWith("!autocommit ")) {
                        c.setAutoCommit(Boolean.parseBoolean(line.substring(12).trim()));
                        out.println("ok");
                    } else if (line.equals("!commit")) {
                        c.commit();
                        out.println("ok");
                    } else if (line.equals("!rollback")) {
                        c.rollback();
                        out.println("ok");
                    } else if (line.startsWith("!prepared ")) {
                        String[] parts = line.substring(10).split("\\|\\|\\|");
                        try (PreparedStatement ps = c.prepareStatement(parts[0].trim())) {
                            String[] ps2 = parts.length > 1 ? parts[1].trim().split(",") : new String[0];
                            for (int i = 0; i < ps2.length; i++) ps.setLong(i + 1, Long.parseLong(ps2[i].trim()));
                            print(out, ps.executeQuery(), parts[0]);
                        }
                    } else if (line.startsWith("!cancel ")) {
                        cancel(c, line.substring(8), out);
                    } else {
                        try (Statement s = c.createStatement()) {
                            if (s.execute(line)) print(out, s.getResultSet(), line);
                            else out.println("update\t" + s.getUpdateCount());
                        }
                    }
                } catch (SQLException e) {
                    out.println("error\t" + e.getSQLState() + "\t" + e.getMessage());
                }
            }
        }
        // The driver's HTTP client keeps non-daemon threads for a minute
        // after a cancel; the JVM need not wait for them.
        System.exit(0);
    }

    static void cancel(Connection c, String sql, PrintStream out) throws Exception {
        try (Statement s = c.createStatement()) {
            Thread t = new Thread(() -> {
                try {
                    Thread.sleep(1500);
                    s.cancel();
                } catch (Exception e) {
                    out.println("cancel failed\t" + e);
                }
            });
            t.start();
            try (ResultSet rs = s.executeQuery(sql)) {
                while (rs.next()) { }
                out.println("not cancelled");
            } catch (SQLException e) {
                out.println("cancelled");
            }
            t.join();
        }
    }

    static void print(PrintStream out, ResultSet rs, String sql) throws SQLException {
        ResultSetMetaData md = rs.getMetaData();
        StringBuilder cols = new StringBuilder("columns");
        for (int i = 1; i <= md.getColumnCount(); i++) {
            cols.append('\t').append(md.getColumnLabel(i)).append(':').append(md.getColumnTypeName(i));
        }
        out.println(cols);
        List<String> rows = new ArrayList<>();
        while (rs.next()) {
            StringBuilder r = new StringBuilder();
            for (int i = 1; i <= md.getColumnCount(); i++) {
                if (i > 1) r.append('\t');
                Object o = rs.getObject(i);
                if (o instanceof byte[]) r.append(HexFormat.of().formatHex((byte[]) o));
                else r.append(o instanceof Object[] ? Arrays.deepToString((Object[]) o) : String.valueOf(o));
            }
            rows.add(r.toString());
        }
        if (!sql.toUpperCase().contains("ORDER BY")) Collections.sort(rows);
        out.println("rows\t" + rows.size());
        for (String r : rows) out.println(r);
    }
}
