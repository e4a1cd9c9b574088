package org.apache.flume;
import java.util.Map;
public interface Event { Map<String,String> getHeaders(); byte[] getBody(); }
